//! Inputs the coverage-guided fuzzer (`scripts/fuzz.sh`, target `packet`) found,
//! kept as regression tests.

use core::net::{Ipv4Addr, Ipv6Addr};

use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, L4Repr, PacketRepr};
use wire::{proto, L4Info};

fn echo(ip: IpRepr) -> Vec<u8> {
    PacketRepr {
        eth: EthernetRepr {
            src: [2, 0, 0, 0, 0, 1],
            dst: [2, 0, 0, 0, 0, 2],
            vlan: None,
        },
        ip,
        l4: L4Repr::IcmpEcho {
            request: true,
            id: 0xdd60,
            seq: 1,
        },
        payload: b"ping".to_vec(),
    }
    .to_bytes()
}

fn v6() -> IpRepr {
    IpRepr::V6(Ipv6Repr {
        src: Ipv6Addr::LOCALHOST,
        dst: "2001:db8::1".parse().unwrap(),
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 64,
    })
}

fn v4() -> IpRepr {
    IpRepr::V4(Ipv4Repr {
        src: Ipv4Addr::new(10, 0, 0, 1),
        dst: Ipv4Addr::new(198, 18, 0, 1),
        dscp: 0,
        ecn: 0,
        ident: 1,
        dont_frag: true,
        ttl: 64,
        options: vec![],
    })
}

/// An IPv6 packet whose next header is 1 (ICMP for IPv4) was read as an ICMP echo
/// and written back as ICMPv6 (protocol 58): a different 5-tuple. ICMP counts only
/// inside its own IP version; anything else is `Other`.
#[test]
fn icmpv4_inside_ipv6_is_other() {
    let mut f = echo(v6());
    f[14 + 6] = proto::ICMP; // next header
    f[14 + 40] = 8; // ICMPv4 echo request type
    let info = wire::parse(&f).unwrap();
    assert_eq!(info.l4, L4Info::Other);
    assert_eq!((info.tuple.proto, info.tuple.src_port), (proto::ICMP, 0));
    assert_eq!(PacketRepr::parse(&f).unwrap(), None);
}

/// The other way round: ICMPv6's echo types (128, 129) inside IPv4 are not echoes.
#[test]
fn icmpv6_echo_type_inside_ipv4_is_not_an_echo() {
    let mut f = echo(v4());
    f[14 + 20] = 128;
    let info = wire::parse(&f).unwrap();
    assert_eq!(info.l4, L4Info::Icmp { msg_type: 128 });
    assert_eq!(info.tuple.src_port, 0);
    // and each version's own echo still is one
    for ip in [v4(), v6()] {
        let info = wire::parse(&echo(ip)).unwrap();
        assert_eq!(info.l4, L4Info::IcmpEcho { request: true });
        assert_eq!(info.tuple.src_port, 0xdd60);
    }
}
