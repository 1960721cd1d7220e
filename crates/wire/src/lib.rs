//! Typed zero-copy views over packet bytes, checksums and flow keys.
//!
//! # The contract
//!
//! Every view (`EthernetFrame`, `Ipv4Packet`, `Ipv6Packet`, `TcpPacket`, `UdpPacket`,
//! `IcmpPacket`) wraps a byte buffer `T: AsRef<[u8]>`. There are two constructors:
//!
//! - `new_checked(buffer)` is for untrusted input. It runs `check_len()`, which
//!   validates every length and offset field the accessors rely on. **After
//!   `check_len()` succeeds, no accessor and no setter panics**, whatever the bytes.
//! - `new_unchecked(buffer)` is for buffers you built yourself (for example through a
//!   `*Repr::emit`). Accessors on a buffer that does not pass `check_len()` may panic.
//!
//! Getters live in the `T: AsRef<[u8]>` impl block, setters in the `T: AsMut<[u8]>`
//! block. Errors are small `Copy` values ([`Malformed`]), never heap strings, so the
//! packet path can count them by cause.
//!
//! [`parse()`] classifies a whole Ethernet frame in one pass and returns a
//! [`PacketInfo`] (offsets, 5-tuple, class) or the [`Malformed`] cause.
//! [`PacketRepr`] is the owned, high-level form used to build packets (trace
//! generation, tests) and to check round trips.
//!
//! ```
//! use wire::{parse, Malformed};
//!
//! // a frame too short for its Ethernet header is classified, never a panic
//! assert_eq!(parse(&[0u8; 10]).unwrap_err(), Malformed::Truncated);
//! ```

#![forbid(unsafe_code)]

pub mod checksum;
pub mod ethernet;
pub mod flow;
pub mod fragments;
pub mod gtpu;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
mod malformed;
pub mod parse;
pub mod repr;
pub mod seqtag;
pub mod tcp;
pub mod udp;

pub use ethernet::EthernetFrame;
pub use flow::{BiFlowKey, Direction, FiveTuple};
pub use icmp::IcmpPacket;
pub use ipv4::Ipv4Packet;
pub use ipv6::Ipv6Packet;
pub use malformed::Malformed;
pub use parse::{parse, parse_fragmentable, Fragment, L4Info, PacketInfo};
pub use repr::{EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, L4Repr, PacketRepr, TcpRepr};
pub use tcp::{TcpFlags, TcpPacket};
pub use udp::UdpPacket;

/// IANA protocol numbers used by flowshift.
pub mod proto {
    /// ICMP for IPv4 (RFC 792).
    pub const ICMP: u8 = 1;
    /// TCP (RFC 9293).
    pub const TCP: u8 = 6;
    /// UDP (RFC 768).
    pub const UDP: u8 = 17;
    /// ICMP for IPv6 (RFC 4443).
    pub const ICMPV6: u8 = 58;
}

/// Ethertypes recognised by [`EthernetFrame`].
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// ARP (recognised only to be counted as non-IP).
    pub const ARP: u16 = 0x0806;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service tag (QinQ); flowshift supports at most one tag.
    pub const QINQ: u16 = 0x88a8;
}

/// A byte range inside a header.
pub(crate) type Field = core::ops::Range<usize>;

#[inline]
pub(crate) fn read_u16(b: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

#[inline]
pub(crate) fn read_u32(b: &[u8], f: Field) -> u32 {
    u32::from_be_bytes([b[f.start], b[f.start + 1], b[f.start + 2], b[f.start + 3]])
}

#[inline]
pub(crate) fn write_u16(b: &mut [u8], f: Field, v: u16) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn write_u32(b: &mut [u8], f: Field, v: u32) {
    b[f].copy_from_slice(&v.to_be_bytes());
}
