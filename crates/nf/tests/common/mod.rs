//! Helpers shared by the nf integration tests.
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::Path;

use nf::{Chain, ChainConfig, Packet, Shard, Verdict};
use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, L4Repr, PacketRepr, TcpRepr};
use wire::TcpFlags;

/// A frame for `proto` ("tcp", "udp", "icmp") with TCP `flags` and a payload.
pub fn frame(
    proto: &str,
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    dport: u16,
    flags: TcpFlags,
    payload: &[u8],
) -> Vec<u8> {
    let ip = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
            src: s,
            dst: d,
            dscp: 0,
            ecn: 0,
            ident: 7,
            dont_frag: true,
            ttl: 64,
            options: vec![],
        }),
        (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6(Ipv6Repr {
            src: s,
            dst: d,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        }),
        _ => panic!("mixed families"),
    };
    let l4 = match proto {
        "tcp" => L4Repr::Tcp(TcpRepr {
            src_port: sport,
            dst_port: dport,
            seq: 1000,
            ack: if flags.contains(TcpFlags::ACK) {
                5000
            } else {
                0
            },
            flags,
            window: 65535,
            urgent: 0,
            options: vec![],
        }),
        "udp" => L4Repr::Udp {
            src_port: sport,
            dst_port: dport,
        },
        "icmp" => L4Repr::IcmpEcho {
            request: flags.contains(TcpFlags::SYN),
            id: sport,
            seq: 1,
        },
        other => panic!("proto {other}"),
    };
    PacketRepr {
        eth: EthernetRepr {
            src: [2, 0, 0, 0, 0, 1],
            dst: [2, 0, 0, 0, 0, 2],
            vlan: None,
        },
        ip,
        l4,
        payload: payload.to_vec(),
    }
    .to_bytes()
}

/// A chain from TOML, its shards.
pub fn chain(toml: &str) -> (Chain, Vec<Shard>) {
    let c = ChainConfig::from_toml(toml)
        .unwrap()
        .build(Path::new("."))
        .unwrap();
    let s = c.new_shards();
    (c, s)
}

/// Runs one frame through the chain (in its shard); returns the verdict and packet.
pub fn run(c: &mut Chain, shards: &mut [Shard], data: Vec<u8>, now: u64) -> (Verdict, Packet) {
    let mut p = c.packet(data, now).expect("valid frame");
    let s = c.shard_of(p.hash);
    let v = c.process(&mut shards[s], &mut p, now);
    (v, p)
}

/// True when every checksum of the frame verifies.
pub fn checksums_ok(frame: &[u8]) -> bool {
    let info = wire::parse(frame).unwrap();
    let l3 = &frame[info.l3_offset as usize..info.l3_end as usize];
    let seg = &frame[info.l4_offset as usize..info.l3_end as usize];
    let (s, d) = (info.tuple.src, info.tuple.dst);
    let ip_ok = match info.ip_version {
        wire::parse::IpVersion::V4 => wire::Ipv4Packet::new_checked(l3).unwrap().verify_checksum(),
        wire::parse::IpVersion::V6 => true,
    };
    let l4_ok = match info.l4 {
        wire::L4Info::Tcp { .. } => wire::TcpPacket::new_checked(seg)
            .unwrap()
            .verify_checksum(s, d),
        wire::L4Info::Udp => wire::UdpPacket::new_checked(seg)
            .unwrap()
            .verify_checksum(s, d),
        wire::L4Info::IcmpEcho { .. } if s.is_ipv4() => wire::IcmpPacket::new_checked(seg)
            .unwrap()
            .verify_checksum_v4(),
        wire::L4Info::IcmpEcho { .. } => wire::IcmpPacket::new_checked(seg)
            .unwrap()
            .verify_checksum_v6(s, d),
        wire::L4Info::IcmpError { .. } => {
            // the ICMP checksum and the quoted IP header's
            let quote = &seg[wire::parse::ICMP_ERROR_QUOTE..];
            let ihl = usize::from(quote[0] & 0x0f) * 4;
            wire::IcmpPacket::new_checked(seg)
                .unwrap()
                .verify_checksum_v4()
                && wire::checksum::checksum(&quote[..ihl]) == 0
        }
        _ => true,
    };
    ip_ok && l4_ok
}

/// A firewall admitting TCP from 10.0.0.0/8, then a NAT onto `external`;
/// `extra` goes into the NAT's table (e.g. `ports = "…"`), `steering` before it.
pub fn fw_nat(steering: &str, external: &str, extra: &str) -> String {
    format!(
        "{steering}\n[[nf]]\nkind = \"firewall\"\nrules = \"allow tcp 10.0.0.0/8 -> any\"\n\
         [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"{external}\"]\n{extra}\n"
    )
}

/// A firewall that denies a quarter of the flows (so entries are created and
/// freed inside bursts), then NAT and seqcheck.
#[allow(dead_code)]
pub const FW_NAT_SEQ: &str = r#"
[[nf]]
kind = "firewall"
rules = "deny any any -> 198.18.0.0/17\nallow any 10.0.0.0/8 -> any"
[[nf]]
kind = "nat"
internal = "10.0.0.0/8"
external = ["203.0.113.0/24"]
[[nf]]
kind = "seqcheck"
"#;
