//! The router NF in a chain: longest-prefix match over disjoint entries, TTL and
//! hop limit, next-hop MAC, drops with their cause, checksums still valid (and
//! accepted by tshark).

mod common;

use std::net::IpAddr;

use common::{chain, checksums_ok, frame, run};
use nf::router::Router;
use nf::{DropCause, Verdict};
use wire::TcpFlags;

const CFG: &str = r#"
[[nf]]
kind = "router"
routes = ["16.0.0.0/24 0", "16.0.0.0/28 1", "2001:db8::/32 5", "2001:db8:1::/48 6"]
"#;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn routes_by_longest_prefix_and_rewrites_ttl_and_next_hop() {
    let (mut c, mut shards) = chain(CFG);
    let mut out = Vec::new();
    for (dst, port) in [
        ("16.0.0.5", 1),
        ("16.0.0.15", 1),
        ("16.0.0.16", 0),
        ("16.0.0.255", 0),
    ] {
        let f = frame(
            "udp",
            ip("10.0.0.1"),
            1000,
            ip(dst),
            53,
            TcpFlags::default(),
            b"fs\0\0\0\x01x",
        );
        let (v, p) = run(&mut c, &mut shards, f, 0);
        assert_eq!(v, Verdict::Forward, "{dst}");
        assert_eq!(&p.data[..6], &Router::next_hop_mac(port), "{dst}");
        let ipv4 = wire::Ipv4Packet::new_checked(&p.data[14..]).unwrap();
        assert_eq!(ipv4.ttl(), 63);
        assert!(
            checksums_ok(&p.data),
            "{dst}: checksums after the TTL update"
        );
        out.push((0u64, p.data));
    }
    for (dst, port) in [("2001:db8:1::9", 6), ("2001:db8:2::9", 5)] {
        let f = frame(
            "tcp",
            ip("2001:db8:ffff::1"),
            1000,
            ip(dst),
            80,
            TcpFlags::SYN,
            b"",
        );
        let (v, p) = run(&mut c, &mut shards, f, 0);
        assert_eq!(v, Verdict::Forward, "{dst}");
        assert_eq!(&p.data[..6], &Router::next_hop_mac(port));
        assert_eq!(
            wire::Ipv6Packet::new_checked(&p.data[14..])
                .unwrap()
                .hop_limit(),
            63
        );
        assert!(checksums_ok(&p.data));
        out.push((0u64, p.data));
    }
    // no route, and a TTL that would reach 0: dropped with their causes
    let f = frame(
        "udp",
        ip("10.0.0.1"),
        1,
        ip("17.0.0.1"),
        2,
        TcpFlags::default(),
        b"",
    );
    assert_eq!(
        run(&mut c, &mut shards, f, 0).0,
        Verdict::Drop(DropCause::NoRoute)
    );
    let mut f = frame(
        "udp",
        ip("10.0.0.1"),
        1,
        ip("16.0.0.1"),
        2,
        TcpFlags::default(),
        b"",
    );
    {
        let mut p = wire::Ipv4Packet::new_checked(&mut f[14..]).unwrap();
        p.set_ttl(1);
        p.fill_checksum();
    }
    assert_eq!(
        run(&mut c, &mut shards, f, 0).0,
        Verdict::Drop(DropCause::TtlExceeded)
    );
    let counters: std::collections::BTreeMap<_, _> = c.nfs()[0].counters().into_iter().collect();
    assert_eq!(
        (
            counters["routed"],
            counters["no_route"],
            counters["ttl_exceeded"]
        ),
        (6, 1, 1)
    );
    // tshark agrees that every forwarded frame is well formed with good checksums
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("router-out.pcap");
    trace::write_pcap(&path, out.iter().map(|(t, f)| (*t, &f[..]))).unwrap();
    let r = trace::tshark::validate(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (r.packets, r.bad_checksums, r.errors),
        (6, 0, 0),
        "{:?}",
        r.samples
    );
}

#[test]
fn bad_routes_are_named() {
    for (routes, want) in [
        (r#"["16.0.0.0/33 1"]"#, "route 1"),
        (r#"["16.0.0.0/24"]"#, "expected `PREFIX PORT`"),
        (r#"["16.0.0.0/24 1", "16.0.0.0/24 2"]"#, "given twice"),
        (r#"["16.0.0.0/24 70000"]"#, "port `70000`"),
        ("[]", "at least one route"),
    ] {
        let cfg = format!("[[nf]]\nkind = \"router\"\nroutes = {routes}\n");
        let e = nf::ChainConfig::from_toml(&cfg)
            .unwrap()
            .build(std::path::Path::new("."))
            .err()
            .unwrap_or_else(|| panic!("{routes} accepted"))
            .to_string();
        assert!(e.contains(want), "{routes}: {e}");
    }
}
