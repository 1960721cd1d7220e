//! Owned, high-level packet representations: build a frame from fields
//! ([`PacketRepr::emit`]) or read one back ([`PacketRepr::parse`]).
//!
//! Used by the trace generator and by tests; the packet path works on views.
//! IPv6 extension headers are not represented (parse skips them, emit writes none).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::parse::{parse, IpVersion, L4Info};
use crate::{
    ethernet, ethertype, icmp, ipv4, ipv6, proto, tcp, udp, EthernetFrame, IcmpPacket, Ipv4Packet,
    Ipv6Packet, Malformed, TcpFlags, TcpPacket, UdpPacket,
};

/// Frames shorter than this (no FCS) are zero-padded, as on the wire.
pub const MIN_FRAME_LEN: usize = 60;

/// Ethernet header fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source MAC.
    pub src: [u8; 6],
    /// Destination MAC.
    pub dst: [u8; 6],
    /// 802.1Q VLAN id (12 bits), if tagged.
    pub vlan: Option<u16>,
}

/// IPv4 header fields (length, protocol and checksum are derived).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN (2 bits).
    pub ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
    /// Options, a multiple of 4 bytes, at most 40.
    pub options: Vec<u8>,
}

/// IPv6 fixed-header fields (payload length and next header are derived).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Traffic class (DSCP << 2 | ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
}

/// Either IP header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => IpAddr::V4(r.src),
            IpRepr::V6(r) => IpAddr::V6(r.src),
        }
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => IpAddr::V4(r.dst),
            IpRepr::V6(r) => IpAddr::V6(r.dst),
        }
    }

    fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(r) => ipv4::MIN_HEADER_LEN + r.options.len(),
            IpRepr::V6(_) => ipv6::HEADER_LEN,
        }
    }
}

/// TCP header fields (checksum derived).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Flags.
    pub flags: TcpFlags,
    /// Window.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Options, a multiple of 4 bytes, at most 40.
    pub options: Vec<u8>,
}

/// The L4 part of a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L4Repr {
    /// TCP.
    Tcp(TcpRepr),
    /// UDP with its ports (length and checksum derived).
    Udp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
    },
    /// ICMP (over IPv4) or ICMPv6 (over IPv6) echo.
    IcmpEcho {
        /// Request (true) or reply.
        request: bool,
        /// Identifier.
        id: u16,
        /// Sequence number.
        seq: u16,
    },
}

impl L4Repr {
    fn header_len(&self) -> usize {
        match self {
            L4Repr::Tcp(t) => tcp::MIN_HEADER_LEN + t.options.len(),
            L4Repr::Udp { .. } => udp::HEADER_LEN,
            L4Repr::IcmpEcho { .. } => icmp::HEADER_LEN,
        }
    }
}

/// A whole frame: Ethernet, IP, L4 and payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketRepr {
    /// Ethernet header.
    pub eth: EthernetRepr,
    /// IP header.
    pub ip: IpRepr,
    /// L4 header.
    pub l4: L4Repr,
    /// L4 payload.
    pub payload: Vec<u8>,
}

impl PacketRepr {
    fn eth_len(&self) -> usize {
        ethernet::HEADER_LEN
            + if self.eth.vlan.is_some() {
                ethernet::VLAN_TAG_LEN
            } else {
                0
            }
    }

    /// Length of every header (Ethernet, IP, L4), i.e. the frame without payload
    /// and padding.
    pub fn header_len(&self) -> usize {
        self.eth_len() + self.ip.header_len() + self.l4.header_len()
    }

    /// Length of the IP packet (header + L4 header + payload).
    pub fn ip_len(&self) -> usize {
        self.ip.header_len() + self.l4.header_len() + self.payload.len()
    }

    /// Length of the emitted frame, padding included.
    pub fn frame_len(&self) -> usize {
        (self.eth_len() + self.ip_len()).max(MIN_FRAME_LEN)
    }

    /// Emits the frame with every checksum filled. `buf` must be exactly
    /// [`frame_len`](Self::frame_len) bytes; padding is zeroed.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), self.frame_len(), "emit buffer length");
        let (eth_len, ip_len) = (self.eth_len(), self.ip_len());
        buf[eth_len + ip_len..].fill(0);
        let mut eth = EthernetFrame::new_unchecked(&mut buf[..]);
        eth.set_dst_addr(self.eth.dst);
        eth.set_src_addr(self.eth.src);
        let et = match self.ip {
            IpRepr::V4(_) => ethertype::IPV4,
            IpRepr::V6(_) => ethertype::IPV6,
        };
        eth.set_header(self.eth.vlan, et);
        let ip_buf = &mut buf[eth_len..eth_len + ip_len];
        let l4_proto = match (&self.l4, &self.ip) {
            (L4Repr::Tcp(_), _) => proto::TCP,
            (L4Repr::Udp { .. }, _) => proto::UDP,
            (L4Repr::IcmpEcho { .. }, IpRepr::V4(_)) => proto::ICMP,
            (L4Repr::IcmpEcho { .. }, IpRepr::V6(_)) => proto::ICMPV6,
        };
        let ip_hl = self.ip.header_len();
        match &self.ip {
            IpRepr::V4(r) => {
                let mut p = Ipv4Packet::new_unchecked(&mut ip_buf[..]);
                p.set_version_and_header_len(ip_hl);
                p.set_dscp_ecn(r.dscp, r.ecn);
                p.set_total_len(ip_len as u16);
                p.set_ident(r.ident);
                p.set_flags_frag(r.dont_frag, false, 0);
                p.set_ttl(r.ttl);
                p.set_protocol(l4_proto);
                p.set_src_addr(r.src);
                p.set_dst_addr(r.dst);
                p.options_mut().copy_from_slice(&r.options);
                p.fill_checksum();
            }
            IpRepr::V6(r) => {
                let mut p = Ipv6Packet::new_unchecked(&mut ip_buf[..]);
                p.set_version_tc_fl(r.traffic_class, r.flow_label);
                p.set_payload_len((ip_len - ip_hl) as u16);
                p.set_next_header(l4_proto);
                p.set_hop_limit(r.hop_limit);
                p.set_src_addr(r.src);
                p.set_dst_addr(r.dst);
            }
        }
        let (src, dst) = (self.ip.src(), self.ip.dst());
        let seg = &mut ip_buf[ip_hl..];
        let l4_hl = self.l4.header_len();
        seg[l4_hl..].copy_from_slice(&self.payload);
        match &self.l4 {
            L4Repr::Tcp(t) => {
                let mut p = TcpPacket::new_unchecked(&mut seg[..]);
                p.set_src_port(t.src_port);
                p.set_dst_port(t.dst_port);
                p.set_seq_number(t.seq);
                p.set_ack_number(t.ack);
                p.set_header_len(l4_hl);
                p.set_flags(t.flags);
                p.set_window(t.window);
                p.set_urgent(t.urgent);
                seg[tcp::MIN_HEADER_LEN..l4_hl].copy_from_slice(&t.options);
                TcpPacket::new_unchecked(&mut seg[..]).fill_checksum(src, dst);
            }
            L4Repr::Udp { src_port, dst_port } => {
                let mut p = UdpPacket::new_unchecked(&mut seg[..]);
                p.set_src_port(*src_port);
                p.set_dst_port(*dst_port);
                p.set_len((l4_hl + self.payload.len()) as u16);
                p.fill_checksum(src, dst);
            }
            L4Repr::IcmpEcho { request, id, seq } => {
                let mut p = IcmpPacket::new_unchecked(&mut seg[..]);
                let ty = match (&self.ip, request) {
                    (IpRepr::V4(_), true) => icmp::types::V4_ECHO_REQUEST,
                    (IpRepr::V4(_), false) => icmp::types::V4_ECHO_REPLY,
                    (IpRepr::V6(_), true) => icmp::types::V6_ECHO_REQUEST,
                    (IpRepr::V6(_), false) => icmp::types::V6_ECHO_REPLY,
                };
                p.set_type_code(ty, 0);
                p.set_echo_id(*id);
                p.set_echo_seq(*seq);
                match self.ip {
                    IpRepr::V4(_) => p.fill_checksum_v4(),
                    IpRepr::V6(_) => p.fill_checksum_v6(src, dst),
                }
            }
        }
    }

    /// Emits into a new vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.frame_len()];
        self.emit(&mut v);
        v
    }

    /// Reads a frame back. Checksums are not verified here (see the views'
    /// `verify_checksum`); protocols other than TCP, UDP and ICMP echo are
    /// [`Malformed::UnknownEthertype`]-free but unsupported and return `None`.
    pub fn parse(frame: &[u8]) -> Result<Option<PacketRepr>, Malformed> {
        let info = parse(frame)?;
        let eth = EthernetFrame::new_unchecked(frame);
        let eth_repr = EthernetRepr {
            src: eth.src_addr(),
            dst: eth.dst_addr(),
            vlan: eth.vlan_id(),
        };
        let l3 = &frame[info.l3_offset as usize..info.l3_end as usize];
        let ip = match info.ip_version {
            IpVersion::V4 => {
                let p = Ipv4Packet::new_unchecked(l3);
                IpRepr::V4(Ipv4Repr {
                    src: p.src_addr(),
                    dst: p.dst_addr(),
                    dscp: p.dscp(),
                    ecn: p.ecn(),
                    ident: p.ident(),
                    dont_frag: p.dont_frag(),
                    ttl: p.ttl(),
                    options: p.options().to_vec(),
                })
            }
            IpVersion::V6 => {
                let p = Ipv6Packet::new_unchecked(l3);
                IpRepr::V6(Ipv6Repr {
                    src: p.src_addr(),
                    dst: p.dst_addr(),
                    traffic_class: p.traffic_class(),
                    flow_label: p.flow_label(),
                    hop_limit: p.hop_limit(),
                })
            }
        };
        let seg = &frame[info.l4_offset as usize..info.l3_end as usize];
        let l4 = match info.l4 {
            L4Info::Tcp { .. } => {
                let p = TcpPacket::new_unchecked(seg);
                L4Repr::Tcp(TcpRepr {
                    src_port: p.src_port(),
                    dst_port: p.dst_port(),
                    seq: p.seq_number(),
                    ack: p.ack_number(),
                    flags: p.flags(),
                    window: p.window(),
                    urgent: p.urgent(),
                    options: p.options().to_vec(),
                })
            }
            L4Info::Udp => L4Repr::Udp {
                src_port: info.tuple.src_port,
                dst_port: info.tuple.dst_port,
            },
            L4Info::IcmpEcho { request } => {
                let p = IcmpPacket::new_unchecked(seg);
                L4Repr::IcmpEcho {
                    request,
                    id: p.echo_id(),
                    seq: p.echo_seq(),
                }
            }
            L4Info::Icmp { .. } | L4Info::IcmpError { .. } | L4Info::Other | L4Info::Fragment => {
                return Ok(None)
            }
        };
        Ok(Some(PacketRepr {
            eth: eth_repr,
            ip,
            l4,
            payload: info.payload(frame).to_vec(),
        }))
    }
}
