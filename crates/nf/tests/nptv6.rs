//! NPTv6 in a chain: RFC 6296's example address both ways, every checksum
//! still valid without being recomputed, an ICMPv6 error's quoted packet
//! translated back, IPv4 and foreign prefixes passed, the unmappable subnet
//! word dropped by cause.

mod common;

use std::net::{IpAddr, Ipv6Addr};

use common::{chain, checksums_ok, frame, run};
use nf::{DropCause, Verdict};
use wire::TcpFlags;

const TOML: &str = r#"
    [[nf]]
    kind = "nptv6"
    inside = "fd01:203:405::/48"
    outside = "2001:db8:1::/48"
"#;

fn v6(s: &str) -> IpAddr {
    s.parse::<Ipv6Addr>().unwrap().into()
}

#[test]
fn the_rfc_example_goes_out_and_comes_back_with_valid_checksums() {
    let (mut c, mut shards) = chain(TOML);
    let (inside, server) = (v6("fd01:203:405:1::1234"), v6("2001:db8:ffff::80"));
    let out = frame("tcp", inside, 40_000, server, 443, TcpFlags::SYN, b"hello");
    let (v, p) = run(&mut c, &mut shards, out, 1);
    assert_eq!(v, Verdict::Forward);
    let mapped = v6("2001:db8:1:d550::1234");
    assert_eq!((p.info.tuple.src, p.info.tuple.dst), (mapped, server));
    assert!(checksums_ok(&p.data), "the TCP checksum holds untouched");
    let parsed = wire::parse(&p.data).unwrap();
    assert_eq!(parsed.tuple.src, mapped, "the bytes say so too");

    for proto in ["tcp", "udp", "icmp"] {
        let back = frame(proto, server, 443, mapped, 40_000, TcpFlags::ACK, b"world");
        let (v, p) = run(&mut c, &mut shards, back, 2);
        assert_eq!(v, Verdict::Forward);
        assert_eq!(wire::parse(&p.data).unwrap().tuple.dst, inside, "{proto}");
        assert!(checksums_ok(&p.data), "{proto}");
    }
    let counters: std::collections::HashMap<_, _> = c.nfs()[0].counters().into_iter().collect();
    assert_eq!((counters["outbound"], counters["inbound"]), (1, 3));
}

#[test]
fn an_icmpv6_error_about_a_translated_packet_is_translated_inside_too() {
    let (mut c, mut shards) = chain(TOML);
    let (inside, server) = (v6("fd01:203:405:7::9"), v6("2001:db8:ffff::80"));
    let (_, sent) = run(
        &mut c,
        &mut shards,
        frame(
            "udp",
            inside,
            5_000,
            server,
            53,
            TcpFlags::default(),
            &[7; 64],
        ),
        1,
    );
    let mapped = sent.info.tuple.src;
    // a router's "packet too big" to the mapped address, quoting what it got
    let router = v6("2001:db8:ffff::1");
    let quote = sent.data[14..].to_vec();
    let mut icmp = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00];
    icmp.extend_from_slice(&quote);
    let (IpAddr::V6(rs), IpAddr::V6(md)) = (router, mapped) else {
        unreachable!()
    };
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, 64]);
    f.extend_from_slice(&rs.octets());
    f.extend_from_slice(&md.octets());
    let at = f.len();
    f.extend_from_slice(&icmp);
    wire::IcmpPacket::new_checked(&mut f[at..])
        .unwrap()
        .fill_checksum_v6(router, mapped);
    let (v, p) = run(&mut c, &mut shards, f, 2);
    assert_eq!(v, Verdict::Forward);
    let l3 = &p.data[14..];
    assert_eq!(
        &l3[24..40],
        &v6_octets(inside),
        "outer destination back inside"
    );
    assert_eq!(
        &l3[48 + 8..48 + 24],
        &v6_octets(inside),
        "the quoted source too"
    );
    assert!(
        wire::IcmpPacket::new_checked(&p.data[54..])
            .unwrap()
            .verify_checksum_v6(router, inside),
        "the ICMPv6 checksum holds"
    );
    let counters: std::collections::HashMap<_, _> = c.nfs()[0].counters().into_iter().collect();
    assert_eq!(counters["related"], 1);
}

fn v6_octets(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V6(a) => a.octets(),
        IpAddr::V4(_) => unreachable!(),
    }
}

#[test]
fn others_pass_and_the_unmappable_word_is_dropped() {
    let (mut c, mut shards) = chain(TOML);
    let v4 = frame(
        "udp",
        IpAddr::from([10, 0, 0, 1]),
        1,
        IpAddr::from([192, 0, 2, 1]),
        2,
        TcpFlags::default(),
        b"x",
    );
    let (v, p) = run(&mut c, &mut shards, v4.clone(), 1);
    assert_eq!((v, p.data), (Verdict::Forward, v4));
    let foreign = frame(
        "udp",
        v6("fd99::1"),
        1,
        v6("2001:db8:ffff::1"),
        2,
        TcpFlags::default(),
        b"x",
    );
    let (v, p) = run(&mut c, &mut shards, foreign.clone(), 2);
    assert_eq!((v, p.data), (Verdict::Forward, foreign));
    let bad = frame(
        "udp",
        v6("fd01:203:405:ffff::1"),
        1,
        v6("2001:db8:ffff::1"),
        2,
        TcpFlags::default(),
        b"x",
    );
    let (v, _) = run(&mut c, &mut shards, bad, 3);
    assert_eq!(v, Verdict::Drop(DropCause::NptUnmappable));
}

#[test]
fn a_stateful_nf_beside_it_is_refused_by_name() {
    let toml = format!("{TOML}\n[[nf]]\nkind = \"firewall\"\nrules = \"allow any any -> any\"\n");
    let e = nf::ChainConfig::from_toml(&toml)
        .unwrap()
        .build(std::path::Path::new("."))
        .err()
        .expect("refused");
    let e = e.to_string();
    assert!(
        e.starts_with("`nf[0]`") && e.contains("`firewall` (firewall) keeps per-flow state"),
        "{e}"
    );
}
