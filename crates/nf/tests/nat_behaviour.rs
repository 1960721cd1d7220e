//! The NAT's RFC 4787 behaviours beyond the golden files: an endpoint-
//! independent mapping lives while any of its flows does and then gives
//! its port back; many inside endpoints over many shards each keep one
//! outside endpoint; what the configuration and the chain refuse, with
//! their reasons.

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use common::{chain, frame, run};
use nf::{ChainConfig, Verdict};
use wire::TcpFlags;

const EIM: &str = r#"
[steering]
buckets = 128
shards = 8
[table]
timer_tick = "1ms"
[[nf]]
kind = "nat"
internal = "10.0.0.0/8"
external = ["203.0.113.1", "203.0.113.2"]
mapping = "endpoint-independent"
filtering = "endpoint-independent"
[nf.timeouts]
udp = "1s"
"#;

fn v4(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn udp(src: &str, sport: u16, dst: &str, dport: u16) -> Vec<u8> {
    frame(
        "udp",
        v4(src),
        sport,
        v4(dst),
        dport,
        TcpFlags::default(),
        b"q",
    )
}

fn in_use(shards: &[nf::Shard]) -> u64 {
    shards
        .iter()
        .map(|s| match &s.locals[0] {
            nf::ShardLocal::NatPool(p) => p.in_use(),
            _ => 0,
        })
        .sum()
}

#[test]
fn each_inside_endpoint_keeps_one_outside_endpoint_over_every_shard() {
    let (mut c, mut shards) = chain(EIM);
    let mut seen: HashMap<(Ipv4Addr, u16), (IpAddr, u16)> = HashMap::new();
    for host in 1..=40u32 {
        let src = Ipv4Addr::from(0x0a00_0000 + host);
        for dst in 1..=6u32 {
            let to = Ipv4Addr::from(0xc612_0000 + dst * 7);
            let (v, p) = run(
                &mut c,
                &mut shards,
                udp(&src.to_string(), 4000, &to.to_string(), 53),
                0,
            );
            assert_eq!(v, Verdict::Forward);
            let out = (p.info.tuple.src, p.info.tuple.src_port);
            let first = *seen.entry((src, 4000)).or_insert(out);
            assert_eq!(first, out, "{src}:4000 to {to}");
        }
    }
    // 40 mappings, each one port, whichever shard holds it
    assert_eq!(in_use(&shards), 40);
    let outside: std::collections::HashSet<_> = seen.values().collect();
    assert_eq!(outside.len(), 40, "no two inside endpoints share one");
    // and every mapping answers a host it never sent to
    for (&(src, sport), &(ext, port)) in &seen {
        let (v, p) = run(
            &mut c,
            &mut shards,
            udp("192.0.2.99", 9, &ext.to_string(), port),
            0,
        );
        assert_eq!(v, Verdict::Forward);
        assert_eq!(
            (p.info.tuple.dst, p.info.tuple.dst_port),
            (IpAddr::V4(src), sport)
        );
    }
}

#[test]
fn a_mapping_lives_while_a_flow_does_then_gives_its_port_back() {
    let (mut c, mut shards) = chain(EIM);
    let sec = 1_000_000_000u64;
    let (_, a) = run(
        &mut c,
        &mut shards,
        udp("10.0.0.1", 5000, "198.18.0.1", 53),
        0,
    );
    let (ext, port) = (a.info.tuple.src, a.info.tuple.src_port);
    // a second flow of the same endpoint, later
    let (_, b) = run(
        &mut c,
        &mut shards,
        udp("10.0.0.1", 5000, "198.18.0.2", 53),
        sec / 2,
    );
    assert_eq!((b.info.tuple.src, b.info.tuple.src_port), (ext, port));
    assert_eq!(in_use(&shards), 1);
    // the first flow ends: the mapping stays for the second
    for s in shards.iter_mut() {
        c.expire(s, sec + sec / 4);
    }
    assert_eq!(in_use(&shards), 1);
    let (v, _) = run(
        &mut c,
        &mut shards,
        udp("192.0.2.5", 7, &ext.to_string(), port),
        sec + sec / 4,
    );
    assert_eq!(v, Verdict::Forward, "still mapped");
    // then every flow ends: the port is free and nobody is let in
    for s in shards.iter_mut() {
        c.expire(s, 3 * sec);
    }
    assert_eq!(in_use(&shards), 0, "port returned");
    assert_eq!(shards.iter().map(|s| s.table.len()).sum::<usize>(), 0);
    let (v, _) = run(
        &mut c,
        &mut shards,
        udp("192.0.2.6", 7, &ext.to_string(), port),
        3 * sec,
    );
    assert_eq!(
        v,
        Verdict::Drop(nf::DropCause::NatNoMapping),
        "the mapping ended"
    );
}

fn refused(toml: &str) -> String {
    match ChainConfig::from_toml(toml).and_then(|c| c.build(Path::new("."))) {
        Ok(_) => panic!("accepted:\n{toml}"),
        Err(e) => e.to_string(),
    }
}

fn nat(extra: &str) -> String {
    format!(
        "[[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.1\"]\n{extra}\n"
    )
}

#[test]
fn what_the_configuration_refuses_says_why() {
    for (extra, why) in [
        (
            "filtering = \"endpoint-independent\"",
            "needs `mapping = \"endpoint-independent\"`",
        ),
        ("mapping = \"full-cone\"", "unknown variant"),
        ("forwards = [\"tcp 203.0.113.1:80 10.0.0.5:80\"]", "expected `tcp|udp"),
        ("forwards = [\"sctp 203.0.113.1:80 -> 10.0.0.5:80\"]", "expected `tcp|udp"),
        (
            "forwards = [\"tcp 203.0.113.9:80 -> 10.0.0.5:80\"]",
            "203.0.113.9 is not one of `external`",
        ),
        (
            "forwards = [\"tcp 203.0.113.1:80 -> 192.168.0.5:80\"]",
            "192.168.0.5 is not in `internal`",
        ),
        (
            "forwards = [\"udp 203.0.113.1:53 -> 10.0.0.5:53\", \"udp 203.0.113.1:53 -> 10.0.0.6:53\"]",
            "shares an endpoint",
        ),
    ] {
        let e = refused(&nat(extra));
        assert!(e.contains(why), "{extra}: {e}");
    }
    // TCP and UDP forwards of one port are two forwards
    let ok = nat(
        "forwards = [\"udp 203.0.113.1:53 -> 10.0.0.5:53\", \"tcp 203.0.113.1:53 -> 10.0.0.5:53\"]",
    );
    ChainConfig::from_toml(&ok)
        .unwrap()
        .build(Path::new("."))
        .unwrap();
}

#[test]
fn what_endpoint_hashing_would_split_is_refused() {
    // a load balancer picks its ports by the plain 5-tuple hash
    let lb = "[[nf]]\nkind = \"lb\"\nsnat = [\"192.0.2.10\"]\n[[nf.service]]\n\
              vip = \"10.9.0.100:80\"\nbackends = [\"10.1.0.1:8080\"]\n";
    let e = refused(&format!(
        "{}{lb}",
        nat("mapping = \"endpoint-independent\"")
    ));
    assert!(e.contains("`nat`'s endpoint-independent mapping"), "{e}");
    // a firewall (per 5-tuple) before it is fine
    let fw = "[[nf]]\nkind = \"firewall\"\nrules = \"allow udp 10.0.0.0/8 -> any\"\n";
    let toml = format!("{fw}{}", nat("mapping = \"endpoint-independent\""));
    ChainConfig::from_toml(&toml)
        .unwrap()
        .build(Path::new("."))
        .unwrap();
}

#[test]
fn a_reload_adds_addresses_and_timeouts_and_refuses_the_rest() {
    let base = |ext: &str, extra: &str| {
        format!(
            "[steering]\nshards = 4\n[[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\n\
             external = [{ext}]\n{extra}\n"
        )
    };
    let build = |t: &str| {
        ChainConfig::from_toml(t)
            .unwrap()
            .build(Path::new("."))
            .unwrap()
    };
    let (mut c, mut shards) = chain(&base("\"203.0.113.1\"", ""));
    let (_, before) = run(
        &mut c,
        &mut shards,
        udp("10.0.0.1", 5000, "198.18.0.1", 53),
        0,
    );
    // an address added at the end, and shorter timeouts
    let grown = build(&base(
        "\"203.0.113.1\", \"203.0.113.2\"",
        "[nf.timeouts]\nudp = \"1s\"",
    ));
    c.reload_nfs(&grown, &[0]).unwrap();
    // the mapping made before goes on
    let (v, p) = run(
        &mut c,
        &mut shards,
        udp("10.0.0.1", 5000, "198.18.0.1", 53),
        1,
    );
    assert_eq!(v, Verdict::Forward);
    assert_eq!(p.info.tuple.src_port, before.info.tuple.src_port);
    // new flows use both addresses
    let mut used = std::collections::HashSet::new();
    for k in 0..64u16 {
        let (_, p) = run(
            &mut c,
            &mut shards,
            udp("10.0.0.2", 1000 + k, "198.18.0.9", 53),
            2,
        );
        used.insert(p.info.tuple.src);
    }
    assert_eq!(used.len(), 2, "{used:?}");
    // and the new UDP timeout holds: everything is gone after 1 s
    for s in shards.iter_mut() {
        c.expire(s, 2_000_000_000);
    }
    assert_eq!(in_use(&shards), 0);
    for (t, why) in [
        (base("\"203.0.113.2\"", ""), "added at the end"),
        (base("\"203.0.113.1\"", "ports = \"2000-60000\""), "`ports`"),
        (
            base("\"203.0.113.1\"", "mapping = \"endpoint-independent\""),
            "`mapping`",
        ),
    ] {
        let e = c.reload_nfs(&build(&t), &[0]).unwrap_err();
        assert!(e.contains(why), "{e}");
    }
}
