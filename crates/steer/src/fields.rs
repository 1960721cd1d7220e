//! Which header fields the NIC hashes, and the byte layout of the hash input.

use core::net::IpAddr;

use wire::FiveTuple;

use crate::toeplitz::MAX_INPUT_LEN;

/// The steering fields (what the RSS model hashes). RSS hashes IP addresses only
/// for protocols without ports (ICMP, fragments, others).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum HashFields {
    /// The source address only (`ethtool rx-flow-hash … s`).
    SrcIp,
    /// The destination address only (`ethtool rx-flow-hash … d`).
    DstIp,
    /// Source and destination addresses.
    Ip,
    /// Addresses and L4 ports (TCP/UDP); addresses only for other protocols.
    #[default]
    IpPorts,
}

impl HashFields {
    /// A stable name, as used in configuration and reports.
    pub const fn name(self) -> &'static str {
        match self {
            HashFields::SrcIp => "src-ip",
            HashFields::DstIp => "dst-ip",
            HashFields::Ip => "ip",
            HashFields::IpPorts => "ip-ports",
        }
    }
}

/// A hash input laid out as the RSS specification orders it: source address,
/// destination address, then source and destination port.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HashInput {
    bytes: [u8; MAX_INPUT_LEN],
    len: u8,
}

impl HashInput {
    /// The input bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// Lays out the RSS input of `t` for `fields`. Ports are included only for TCP and
/// UDP, as NICs do. A mixed-family tuple hashes as IPv6 with the IPv4 address mapped.
pub fn hash_input(t: &FiveTuple, fields: HashFields) -> HashInput {
    let mut bytes = [0u8; MAX_INPUT_LEN];
    let one = match fields {
        HashFields::SrcIp => Some(t.src),
        HashFields::DstIp => Some(t.dst),
        _ => None,
    };
    if let Some(a) = one {
        let n = match a {
            IpAddr::V4(a) => {
                bytes[..4].copy_from_slice(&a.octets());
                4
            }
            IpAddr::V6(a) => {
                bytes[..16].copy_from_slice(&a.octets());
                16
            }
        };
        return HashInput { bytes, len: n };
    }
    let mut n = match (t.src, t.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            bytes[..4].copy_from_slice(&s.octets());
            bytes[4..8].copy_from_slice(&d.octets());
            8
        }
        (s, d) => {
            bytes[..16].copy_from_slice(&v6(s));
            bytes[16..32].copy_from_slice(&v6(d));
            32
        }
    };
    let has_ports = matches!(t.proto, wire::proto::TCP | wire::proto::UDP);
    if fields == HashFields::IpPorts && has_ports {
        bytes[n..n + 2].copy_from_slice(&t.src_port.to_be_bytes());
        bytes[n + 2..n + 4].copy_from_slice(&t.dst_port.to_be_bytes());
        n += 4;
    }
    HashInput {
        bytes,
        len: n as u8,
    }
}

fn v6(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}
