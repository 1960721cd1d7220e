//! Property tests: random valid packets round-trip through bytes → view → repr →
//! bytes; random and truncated byte strings never make a parser or accessor panic.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, L4Repr, PacketRepr, TcpRepr};
use wire::{
    parse, EthernetFrame, IcmpPacket, Ipv4Packet, Ipv6Packet, L4Info, Malformed, TcpFlags,
    TcpPacket, UdpPacket,
};

fn ipv4_repr() -> impl Strategy<Value = IpRepr> {
    (
        any::<u32>(),
        any::<u32>(),
        0u8..64,
        0u8..4,
        any::<u16>(),
        any::<bool>(),
        1u8..=255,
        prop::collection::vec(any::<[u8; 4]>(), 0..=10),
    )
        .prop_map(|(s, d, dscp, ecn, ident, df, ttl, opts)| {
            IpRepr::V4(Ipv4Repr {
                src: Ipv4Addr::from(s),
                dst: Ipv4Addr::from(d),
                dscp,
                ecn,
                ident,
                dont_frag: df,
                ttl,
                options: opts.concat(),
            })
        })
}

fn ipv6_repr() -> impl Strategy<Value = IpRepr> {
    (
        any::<u128>(),
        any::<u128>(),
        any::<u8>(),
        0u32..(1 << 20),
        1u8..=255,
    )
        .prop_map(|(s, d, tc, fl, hl)| {
            IpRepr::V6(Ipv6Repr {
                src: Ipv6Addr::from(s),
                dst: Ipv6Addr::from(d),
                traffic_class: tc,
                flow_label: fl,
                hop_limit: hl,
            })
        })
}

fn l4_repr() -> impl Strategy<Value = L4Repr> {
    prop_oneof![
        (
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            any::<u32>(),
            any::<u8>(),
            any::<u16>(),
            any::<u16>(),
            prop::collection::vec(any::<[u8; 4]>(), 0..=10),
        )
            .prop_map(|(sp, dp, seq, ack, fl, win, urg, opts)| {
                L4Repr::Tcp(TcpRepr {
                    src_port: sp,
                    dst_port: dp,
                    seq,
                    ack,
                    flags: TcpFlags(fl),
                    window: win,
                    urgent: urg,
                    options: opts.concat(),
                })
            }),
        (any::<u16>(), any::<u16>()).prop_map(|(sp, dp)| L4Repr::Udp {
            src_port: sp,
            dst_port: dp
        }),
        (any::<bool>(), any::<u16>(), any::<u16>())
            .prop_map(|(request, id, seq)| L4Repr::IcmpEcho { request, id, seq }),
    ]
}

fn packet_repr() -> impl Strategy<Value = PacketRepr> {
    (
        any::<[u8; 6]>(),
        any::<[u8; 6]>(),
        prop::option::of(0u16..4096),
        prop_oneof![ipv4_repr(), ipv6_repr()],
        l4_repr(),
        prop::collection::vec(any::<u8>(), 0..1400),
    )
        .prop_map(|(src, dst, vlan, ip, l4, payload)| PacketRepr {
            eth: EthernetRepr { src, dst, vlan },
            ip,
            l4,
            payload,
        })
}

/// Calls every accessor of every view that accepts `b`; used to prove the contract
/// "after `check_len` succeeds no accessor panics".
fn touch_everything(b: &[u8]) {
    if let Ok(f) = EthernetFrame::new_checked(b) {
        let _ = (
            f.dst_addr(),
            f.src_addr(),
            f.vlan_id(),
            f.ethertype(),
            f.payload().len(),
        );
    }
    if let Ok(p) = Ipv4Packet::new_checked(b) {
        let _ = (
            p.dscp(),
            p.ecn(),
            p.ident(),
            p.is_fragment(),
            p.ttl(),
            p.protocol(),
        );
        let _ = (
            p.src_addr(),
            p.dst_addr(),
            p.options().len(),
            p.payload().len(),
        );
        let _ = p.verify_checksum();
    }
    if let Ok(p) = Ipv6Packet::new_checked(b) {
        let _ = (
            p.traffic_class(),
            p.flow_label(),
            p.hop_limit(),
            p.src_addr(),
            p.dst_addr(),
        );
        let _ = (p.payload().len(), p.upper_layer());
    }
    let any = IpAddr::V4(Ipv4Addr::LOCALHOST);
    if let Ok(p) = TcpPacket::new_checked(b) {
        let _ = (
            p.src_port(),
            p.dst_port(),
            p.seq_number(),
            p.ack_number(),
            p.flags(),
        );
        let _ = (p.window(), p.urgent(), p.options().len(), p.payload().len());
        let _ = p.verify_checksum(any, any);
    }
    if let Ok(p) = UdpPacket::new_checked(b) {
        let _ = (
            p.src_port(),
            p.dst_port(),
            p.payload().len(),
            p.verify_checksum(any, any),
        );
    }
    if let Ok(p) = IcmpPacket::new_checked(b) {
        let _ = (
            p.msg_type(),
            p.code(),
            p.echo_id(),
            p.echo_seq(),
            p.payload().len(),
        );
    }
    if let Ok(info) = parse(b) {
        assert!(info.l3_offset <= info.l4_offset);
        assert!(info.l4_offset as usize <= info.l3_end as usize);
        assert!(info.l3_end as usize <= b.len());
        let _ = info.payload(b);
    }
    let _ = PacketRepr::parse(b);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn repr_bytes_repr_bytes(r in packet_repr()) {
        let bytes = r.to_bytes();
        let back = PacketRepr::parse(&bytes).expect("valid").expect("supported");
        prop_assert_eq!(&back, &r);
        prop_assert_eq!(back.to_bytes(), bytes.clone());

        // the views agree with the repr and every checksum verifies
        let info = parse(&bytes).unwrap();
        prop_assert_eq!(info.tuple.src, r.ip.src());
        prop_assert_eq!(info.tuple.dst, r.ip.dst());
        prop_assert_eq!(info.payload(&bytes), &r.payload[..]);
        let l3 = &bytes[info.l3_offset as usize..info.l3_end as usize];
        let seg = &bytes[info.l4_offset as usize..info.l3_end as usize];
        if let IpRepr::V4(_) = r.ip {
            prop_assert!(Ipv4Packet::new_checked(l3).unwrap().verify_checksum());
        }
        let (s, d) = (r.ip.src(), r.ip.dst());
        match (info.l4, &r.ip) {
            (L4Info::Tcp { .. }, _) => prop_assert!(TcpPacket::new_checked(seg).unwrap().verify_checksum(s, d)),
            (L4Info::Udp, _) => prop_assert!(UdpPacket::new_checked(seg).unwrap().verify_checksum(s, d)),
            (L4Info::IcmpEcho { .. }, IpRepr::V4(_)) => prop_assert!(IcmpPacket::new_checked(seg).unwrap().verify_checksum_v4()),
            (L4Info::IcmpEcho { .. }, IpRepr::V6(_)) => prop_assert!(IcmpPacket::new_checked(seg).unwrap().verify_checksum_v6(s, d)),
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }

    #[test]
    fn truncations_of_valid_packets_never_panic(r in packet_repr(), cut in any::<prop::sample::Index>()) {
        let bytes = r.to_bytes();
        let n = cut.index(bytes.len());
        touch_everything(&bytes[..n]);
        // a cut inside the IP packet is always reported, never parsed as valid
        let ip_end = if r.eth.vlan.is_some() { 18 } else { 14 } + r.ip_len();
        if n < ip_end {
            prop_assert!(parse(&bytes[..n]).is_err());
        }
    }

    #[test]
    fn random_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..200)) {
        touch_everything(&b);
    }

    #[test]
    fn corrupted_bytes_never_panic(r in packet_repr(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = r.to_bytes();
        for (i, v) in flips {
            let i = i.index(bytes.len());
            bytes[i] = v;
        }
        touch_everything(&bytes);
    }
}

/// Builds a valid IPv4/TCP frame and breaks one thing at a time: each cause is named.
#[test]
fn each_cause_is_classified() {
    let r = PacketRepr {
        eth: EthernetRepr {
            src: [2, 0, 0, 0, 0, 1],
            dst: [2, 0, 0, 0, 0, 2],
            vlan: None,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            dscp: 0,
            ecn: 0,
            ident: 1,
            dont_frag: true,
            ttl: 64,
            options: vec![],
        }),
        l4: L4Repr::Tcp(TcpRepr {
            src_port: 1,
            dst_port: 2,
            seq: 0,
            ack: 0,
            flags: TcpFlags::SYN,
            window: 1,
            urgent: 0,
            options: vec![],
        }),
        payload: vec![0; 20],
    };
    let good = r.to_bytes();
    assert!(parse(&good).is_ok());
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        parse(&b).unwrap_err()
    };
    assert_eq!(with(&|b| b.truncate(10)), Malformed::Truncated);
    assert_eq!(with(&|b| b.truncate(40)), Malformed::Truncated);
    assert_eq!(
        with(&|b| b[12..14].copy_from_slice(&[0x08, 0x06])),
        Malformed::UnknownEthertype
    );
    assert_eq!(
        with(&|b| b[12..14].copy_from_slice(&[0x88, 0xa8])),
        Malformed::VlanStack
    );
    assert_eq!(with(&|b| b[14] = 0x65), Malformed::BadVersion);
    assert_eq!(with(&|b| b[14] = 0x43), Malformed::BadIhl);
    assert_eq!(
        with(&|b| b[16..18].copy_from_slice(&[0, 8])),
        Malformed::BadTotalLength
    );
    assert_eq!(with(&|b| b[20] = 0x20), Malformed::Fragment);
    assert_eq!(
        with(&|b| b[14 + 20 + 12] = 0x30),
        Malformed::BadTcpDataOffset
    );
    assert_eq!(
        with(&|b| b[14 + 20 + 12] = 0xf0),
        Malformed::BadTcpDataOffset
    );

    let mut u = r.clone();
    u.l4 = L4Repr::Udp {
        src_port: 1,
        dst_port: 2,
    };
    let mut b = u.to_bytes();
    b[14 + 20 + 5] = 3;
    assert_eq!(parse(&b).unwrap_err(), Malformed::BadUdpLength);

    let mut v6 = u.clone();
    v6.ip = IpRepr::V6(Ipv6Repr {
        src: "2001:db8::1".parse().unwrap(),
        dst: "2001:db8::2".parse().unwrap(),
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 64,
    });
    let mut b = v6.to_bytes();
    b[14 + 6] = 44; // a fragment header in place of UDP
    b[14 + 40..14 + 48].copy_from_slice(&[17, 0, 0, 9, 0, 0, 0, 1]);
    assert_eq!(parse(&b).unwrap_err(), Malformed::Fragment);
    b[14] = 0x45;
    assert_eq!(parse(&b).unwrap_err(), Malformed::BadVersion);
}

proptest! {
    /// A looped replay's lap rewrite keeps every checksum valid and reads back.
    #[test]
    fn relap_keeps_checksums(r in packet_repr(), seq in 0u32..(1 << 24), lap in any::<u8>(), odd in any::<bool>()) {
        let mut r = r;
        if matches!(r.l4, L4Repr::IcmpEcho { .. }) {
            r.l4 = L4Repr::Udp { src_port: 1, dst_port: 2 };
        }
        // an odd-length IPv4 option block is impossible; shift the tag by one byte instead
        let mut payload = if odd { vec![0xee] } else { vec![] };
        payload.extend_from_slice(&wire::seqtag::encode(seq));
        payload.extend_from_slice(&r.payload);
        r.payload = payload;
        let mut bytes = r.to_bytes();
        let mut info = parse(&bytes).unwrap();
        if odd {
            info.payload_offset += 1; // the tag sits one byte into the payload
        }
        prop_assert!(wire::seqtag::relap(&mut bytes, &info, lap));
        let tag = wire::seqtag::decode(&bytes[info.payload_offset as usize..]).unwrap();
        prop_assert_eq!(tag & wire::seqtag::SEQ_MASK, seq);
        prop_assert_eq!(wire::seqtag::lap(tag), lap);
        let (s, d) = (info.tuple.src, info.tuple.dst);
        let seg = &bytes[info.l4_offset as usize..info.l3_end as usize];
        match info.l4 {
            L4Info::Tcp { .. } => prop_assert!(TcpPacket::new_checked(seg).unwrap().verify_checksum(s, d)),
            L4Info::Udp => prop_assert!(UdpPacket::new_checked(seg).unwrap().verify_checksum(s, d)),
            _ => {}
        }
    }
}
