//! NAT: replies land in the forward flow's RSS bucket for every port the pool hands
//! out (and only for those), translate-then-reverse is the identity, checksums stay
//! valid, exhaustion is a counted drop, and a translated trace passes tshark.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::{chain, checksums_ok, frame, run};
use nf::nat::PortPlan;
use nf::{DropCause, Verdict};
use proptest::prelude::*;
use steer::{RssKey, Toeplitz};
use wire::{FiveTuple, TcpFlags};

const NAT: &str = r#"
[steering]
buckets = 128
shards = 8
[[nf]]
kind = "nat"
internal = "10.0.0.0/8"
external = ["203.0.113.0/29"]
"#;

fn v4(x: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(x))
}

#[test]
fn exactly_the_pool_group_keeps_the_reply_in_the_bucket() {
    let (mut c, mut shards) = chain(NAT);
    let hasher = c.hasher().clone();
    let plan = PortPlan::new(&Toeplitz::new(RssKey::SYMMETRIC), 127, 1024, 65535);
    let mut x = 0x9e37_79b9u32;
    for i in 0..40 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let proto = if i % 2 == 0 { "tcp" } else { "udp" };
        let src = v4(0x0a00_0000 | (x >> 8));
        let dst = v4(0xc612_0000 | (x & 0xffff));
        let (v, p) = run(
            &mut c,
            &mut shards,
            frame(
                proto,
                src,
                1024 + (x % 60000) as u16,
                dst,
                443,
                TcpFlags::SYN,
                b"x",
            ),
            0,
        );
        assert_eq!(v, Verdict::Forward);
        let fwd_bucket = p.hash & 127;
        let t = p.info.tuple; // translated: ext:port -> dst:443
        let chosen = plan.value_of(t.src_port);
        // every port of the range: the reply is in the bucket iff the port is in the chosen group
        for port in 1024..=65535u16 {
            let reply = FiveTuple {
                src: t.dst,
                dst: t.src,
                src_port: t.dst_port,
                dst_port: port,
                proto: t.proto,
            };
            let same = hasher.hash(&reply) & 127 == fwd_bucket;
            assert_eq!(same, plan.value_of(port) == chosen, "flow {i} port {port}");
        }
    }
}

#[test]
fn every_port_a_shard_hands_out_keeps_the_bucket() {
    // one external address, 64 ports: flows of one bucket drain their group
    let toml = r#"
        [steering]
        buckets = 64
        shards = 1
        [[nf]]
        kind = "nat"
        internal = "10.0.0.0/8"
        external = ["203.0.113.1"]
        ports = "20000-20063"
    "#;
    let (mut c, mut shards) = chain(toml);
    let hasher = c.hasher().clone();
    let (mut ok, mut exhausted) = (0, 0);
    for i in 0..2000u32 {
        let src = v4(0x0a00_0000 | i);
        let f = frame(
            "udp",
            src,
            5000,
            v4(0xc612_0001),
            53,
            TcpFlags::default(),
            b"q",
        );
        let (v, p) = run(&mut c, &mut shards, f, 0);
        match v {
            Verdict::Forward => {
                let t = p.info.tuple;
                assert!((20000..=20063).contains(&t.src_port));
                assert_eq!(hasher.hash(&t.reversed()) & 63, p.hash & 63, "reply bucket");
                ok += 1;
            }
            Verdict::Drop(DropCause::NatPortsExhausted) => exhausted += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ok, 64, "each of the 64 ports used exactly once");
    assert_eq!(exhausted, 2000 - 64);
    assert_eq!(
        c.counters().dropped(DropCause::NatPortsExhausted),
        2000 - 64
    );
}

fn flow() -> impl Strategy<Value = (u32, u16, u32, u16, u8)> {
    (
        0u32..1 << 24,
        1u16..=65535,
        any::<u32>(),
        1u16..=65535,
        0u8..3,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]
    #[test]
    fn translate_then_reverse_is_identity((host, sport, server, dport, kind) in flow()) {
        prop_assume!(server >> 24 != 10 && server >> 8 != 0xcb0071);
        let (mut c, mut shards) = chain(NAT);
        let proto = ["tcp", "udp", "icmp"][kind as usize];
        let (src, dst) = (v4(0x0a00_0000 | host), v4(server));
        let out = frame(proto, src, sport, dst, dport, TcpFlags::SYN, b"payload!");
        let (v, p) = run(&mut c, &mut shards, out, 0);
        if v == Verdict::Drop(DropCause::NatUnsteerable) {
            // ICMP: no external address of the pool keeps the reply in the bucket
            prop_assert_eq!(proto, "icmp");
            return Ok(());
        }
        prop_assert_eq!(v, Verdict::Forward);
        prop_assert!(checksums_ok(&p.data), "outbound checksums");
        let t = p.info.tuple;
        prop_assert!(matches!(t.src, IpAddr::V4(a) if a.octets()[..3] == [203, 0, 113]));
        prop_assert_eq!(t.dst, dst);
        prop_assert_eq!(p.payload(), b"payload!");
        // the reply to the translated packet
        let flags = TcpFlags::SYN | TcpFlags::ACK;
        let (rsport, rdport) = if proto == "icmp" { (t.src_port, t.src_port) } else { (t.dst_port, t.src_port) };
        let reply = frame(proto, t.dst, rsport, t.src, rdport, if proto == "icmp" { TcpFlags::default() } else { flags }, b"answer");
        let (v, r) = run(&mut c, &mut shards, reply, 1);
        prop_assert_eq!(v, Verdict::Forward);
        prop_assert!(checksums_ok(&r.data), "inbound checksums");
        prop_assert_eq!(r.hash & 127, p.hash & 127, "same bucket");
        let back = r.info.tuple;
        prop_assert_eq!(back.dst, src);
        prop_assert_eq!(back.src, dst);
        if proto != "icmp" {
            prop_assert_eq!(back.dst_port, sport);
            prop_assert_eq!(back.src_port, dport);
        } else {
            prop_assert_eq!(back.dst_port, sport, "echo id restored");
        }
    }
}

#[test]
fn unsolicited_inbound_is_a_counted_drop() {
    let (mut c, mut shards) = chain(NAT);
    let f = frame(
        "tcp",
        v4(0xc612_0001),
        80,
        "203.0.113.1".parse().unwrap(),
        40000,
        TcpFlags::SYN,
        b"",
    );
    let (v, _) = run(&mut c, &mut shards, f, 0);
    assert_eq!(v, Verdict::Drop(DropCause::NatNoMapping));
    assert_eq!(c.counters().dropped(DropCause::NatNoMapping), 1);
}

#[test]
fn expiry_returns_ports_and_drops_the_alias() {
    let toml = r#"
        [steering]
        buckets = 64
        shards = 1
        [table]
        timer_tick = "1ms"
        [[nf]]
        kind = "nat"
        internal = "10.0.0.0/8"
        external = ["203.0.113.1"]
        [nf.timeouts]
        udp = "1s"
    "#;
    let (mut c, mut shards) = chain(toml);
    let f = frame(
        "udp",
        v4(0x0a00_0001),
        5000,
        v4(0xc612_0001),
        53,
        TcpFlags::default(),
        b"q",
    );
    let (_, p) = run(&mut c, &mut shards, f, 0);
    let t = p.info.tuple;
    assert_eq!(shards[0].table.len(), 1);
    c.expire(&mut shards[0], 2_000_000_000);
    assert_eq!(shards[0].table.len(), 0, "entry freed");
    match &shards[0].locals[0] {
        nf::ShardLocal::NatPool(pool) => assert_eq!(pool.in_use(), 0, "port returned"),
        _ => unreachable!(),
    }
    // a reply to the old mapping is now unsolicited
    let reply = frame(
        "udp",
        t.dst,
        t.dst_port,
        t.src,
        t.src_port,
        TcpFlags::default(),
        b"a",
    );
    let (v, _) = run(&mut c, &mut shards, reply, 2_000_000_001);
    assert_eq!(v, Verdict::Drop(DropCause::NatNoMapping));
}

/// An ICMPv4 "fragmentation needed" from `router` to `to`, quoting `quoted`
/// (an IP packet's first bytes).
fn frag_needed(router: [u8; 4], to: [u8; 4], quoted: &[u8]) -> Vec<u8> {
    let mut icmp = vec![3, 4, 0, 0, 0, 0, 0x05, 0x78]; // MTU 1400
    icmp.extend_from_slice(quoted);
    let ck = wire::checksum::checksum(&icmp);
    icmp[2..4].copy_from_slice(&ck.to_be_bytes());
    let total = (20 + icmp.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&router);
    ip.extend_from_slice(&to);
    let ck = wire::checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    f.extend_from_slice(&ip);
    f.extend_from_slice(&icmp);
    f
}

#[test]
fn icmp_errors_about_a_translated_flow_are_related_and_translated() {
    let (mut c, mut shards) = chain(&common::fw_nat("", "203.0.113.1", ""));
    let (client, server) = (v4(0x0a00_0002), v4(0xc612_0001));
    let syn = frame("tcp", client, 40000, server, 443, TcpFlags::SYN, b"");
    let (v, out) = run(&mut c, &mut shards, syn, 0);
    assert_eq!(v, Verdict::Forward);
    let ext_port = out.info.tuple.src_port;
    // a router on the way says the segment was too big: it quotes the
    // translated segment, to the external address
    let quoted = &out.data[14..14 + 40];
    let err = frag_needed([198, 51, 100, 9], [203, 0, 113, 1], quoted);
    let (v, p) = run(&mut c, &mut shards, err, 1);
    assert_eq!(v, Verdict::Forward, "RELATED: path MTU discovery works");
    // outer destination and the quoted source are the client's again
    let ip = wire::Ipv4Packet::new_checked(&p.data[14..]).unwrap();
    assert_eq!(ip.dst_addr(), std::net::Ipv4Addr::new(10, 0, 0, 2));
    assert_eq!(ip.src_addr(), std::net::Ipv4Addr::new(198, 51, 100, 9));
    let q = &p.data[14 + 20 + 8..];
    assert_eq!(&q[12..16], &[10, 0, 0, 2], "quoted source address");
    assert_eq!(
        u16::from_be_bytes([q[20], q[21]]),
        40000,
        "quoted source port"
    );
    assert_eq!(&q[16..20], &[198, 18, 0, 1], "quoted destination untouched");
    assert!(checksums_ok(&p.data), "checksums after translation");
    // the quoted TCP checksum still matches the quoted (now internal) segment
    let mut seg = q[20..40].to_vec();
    let ck = u16::from_be_bytes([seg[16], seg[17]]);
    seg[16..18].fill(0);
    let want = wire::checksum::l4_checksum(client, server, 6, &seg);
    assert_eq!(ck, want, "quoted TCP checksum");
    assert!(ext_port >= 1024);
    // an error about a flow nobody opened passes neither the firewall nor the NAT
    let mut stray = quoted.to_vec();
    stray[20..22].copy_from_slice(&(ext_port ^ 1).to_be_bytes());
    let err = frag_needed([198, 51, 100, 9], [203, 0, 113, 1], &stray);
    let (v, _) = run(&mut c, &mut shards, err, 2);
    assert!(matches!(v, Verdict::Drop(_)), "{v:?}");
    let fw = c.nfs()[0].counters();
    assert!(fw.contains(&("related", 1)), "{fw:?}");
    let nat = c.nfs()[1].counters();
    assert!(nat.contains(&("related", 1)), "{nat:?}");
}

/// The default chain's shards at 16 cores: 256 shards of 256 buckets over a
/// /24, where each bucket group has fewer ports (≈ 252) than there are shards.
/// Every shard still maps its new flows (hundreds of flows land in the last
/// four shards, which own no place of any group at any one address).
#[test]
fn every_shard_maps_flows_when_groups_have_fewer_ports_than_shards() {
    let toml = r#"
        [steering]
        buckets = 256
        shards = 256
        [[nf]]
        kind = "nat"
        internal = "10.0.0.0/8"
        external = ["203.0.113.0/24"]
    "#;
    let (mut c, mut shards) = chain(toml);
    let mut per_shard = vec![0u32; 256];
    let mut x = 0x2545_f491u32;
    for i in 0..20_000u32 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let f = frame(
            "tcp",
            v4(0x0a00_0000 | i),
            1024 + (x % 60000) as u16,
            v4(0xc612_0000 | (x >> 16)),
            443,
            TcpFlags::SYN,
            b"",
        );
        let (v, p) = run(&mut c, &mut shards, f, 0);
        assert_eq!(v, Verdict::Forward, "flow {i}");
        per_shard[(p.hash & 255) as usize] += 1;
    }
    assert!(
        per_shard[252..].iter().all(|&n| n >= 40),
        "{:?}",
        &per_shard[252..]
    );
    assert_eq!(c.counters().dropped(DropCause::NatPortsExhausted), 0);
}

/// A connection that reuses a closed one's ports (a client's port reused
/// after TIME_WAIT, a replay looping) opens the mapping again: it keeps the
/// established timeout once answered, not the closing one its predecessor
/// left, and so its mapping (its outside port) outlives an idle minute.
#[test]
fn a_new_connection_on_a_closed_mappings_ports_reopens_it() {
    let cfg = r#"
[steering]
shards = 1
[[nf]]
kind = "nat"
internal = "10.0.0.0/8"
external = ["203.0.113.1"]
[nf.timeouts]
tcp_established = "600s"
tcp_transitory = "4s"
"#;
    let (mut c, mut s) = chain(cfg);
    let (inside, server) = (v4(0x0a00_0002), v4(0xc633_6402));
    let s_ = 1_000_000_000u64;
    let out = |c: &mut nf::Chain, s: &mut [nf::Shard], f: TcpFlags, t: u64| {
        let (v, p) = run(c, s, frame("tcp", inside, 40_000, server, 80, f, b""), t);
        assert_eq!(v, Verdict::Forward);
        (p.info.tuple.src, p.info.tuple.src_port)
    };
    let back = |c: &mut nf::Chain, s: &mut [nf::Shard], to: (IpAddr, u16), f: TcpFlags, t: u64| {
        let (v, _) = run(c, s, frame("tcp", server, 80, to.0, to.1, f, b""), t);
        assert_eq!(v, Verdict::Forward);
    };
    // a connection, opened and closed
    let mapped = out(&mut c, &mut s, TcpFlags::SYN, 0);
    back(&mut c, &mut s, mapped, TcpFlags::SYN | TcpFlags::ACK, 0);
    out(&mut c, &mut s, TcpFlags::ACK, 0);
    out(&mut c, &mut s, TcpFlags::FIN | TcpFlags::ACK, s_);
    back(&mut c, &mut s, mapped, TcpFlags::FIN | TcpFlags::ACK, s_);
    // the next one on the same ports, within the closing timeout
    assert_eq!(out(&mut c, &mut s, TcpFlags::SYN, 2 * s_), mapped);
    back(
        &mut c,
        &mut s,
        mapped,
        TcpFlags::SYN | TcpFlags::ACK,
        2 * s_,
    );
    assert_eq!(out(&mut c, &mut s, TcpFlags::ACK, 2 * s_), mapped);
    // a minute idle: far past the closing timeout, well within the established one
    c.expire(&mut s[0], 62 * s_);
    let released = |c: &nf::Chain| {
        c.nfs()[0]
            .counters()
            .into_iter()
            .find(|(k, _)| *k == "released")
            .map(|(_, v)| v)
    };
    assert_eq!(
        released(&c),
        Some(0),
        "the open connection's mapping expired"
    );
    assert_eq!(out(&mut c, &mut s, TcpFlags::ACK, 62 * s_), mapped);
}
