//! A flow entry leaves its chain as bytes and is installed in another node's
//! chain (a Sirius secondary): the firewall's connection and the NAT's mapping
//! — with the first node's external address, not in the second's pool — carry
//! the connection on there, in both directions, as they would have on the
//! first node; the second node's own port pool is untouched, before and after
//! the copy expires. A node that comes back with the same address and takes
//! its mappings back reserves their ports: its new connections get others.
//! NFs whose state cannot travel are named; bytes that are not an image are
//! refused, never a panic.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::{chain, checksums_ok, frame, fw_nat, run};
use nf::{InstallError, Verdict};
use wire::TcpFlags;

const STEERING: &str = "[steering]\nbuckets = 64\nshards = 4\n[table]\ntimer_tick = \"1ms\"";

fn v4(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

fn in_use(shard: &nf::Shard) -> u64 {
    match &shard.locals[1] {
        nf::ShardLocal::NatPool(p) => p.in_use(),
        _ => unreachable!("the NAT is the second NF"),
    }
}

#[test]
fn an_entry_installed_on_another_node_carries_the_connection_on() {
    // node A translates to 203.0.113.16/28, node B to 203.0.113.32/28
    let (mut a, mut sa) = chain(&fw_nat(STEERING, "203.0.113.16/28", ""));
    let (mut b, mut sb) = chain(&fw_nat(STEERING, "203.0.113.32/28", ""));
    a.portable().unwrap();
    let (client, server) = (v4([10, 0, 0, 2]), v4([198, 51, 100, 2]));
    let syn = frame("tcp", client, 40_000, server, 80, TcpFlags::SYN, b"");
    let (v, out) = run(&mut a, &mut sa, syn, 1_000_000);
    assert_eq!(v, Verdict::Forward);
    let (ext, ext_port) = (out.info.tuple.src, out.info.tuple.src_port);
    let IpAddr::V4(e) = ext else { unreachable!() };
    assert_eq!(e.octets()[..3], [203, 0, 113]);
    assert!((16..32).contains(&e.octets()[3]), "{ext}");

    // A's entry, at A's clock, installed at B (another clock)
    let s = a.shard_of(out.hash);
    let id = out.entry.expect("an entry");
    let bytes = a.export(&sa[s], id, 1_000_000);
    let got = b.install(&mut sb[s], &bytes, 77_000_000).unwrap();
    assert!(got.is_some());
    assert_eq!(sb[s].table.len(), 1);

    // the server answers A's external address; B translates it back and the
    // firewall knows the connection
    let synack = frame(
        "tcp",
        server,
        80,
        ext,
        ext_port,
        TcpFlags::SYN | TcpFlags::ACK,
        b"",
    );
    let (v, back) = run(&mut b, &mut sb, synack, 78_000_000);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(
        (back.info.tuple.dst, back.info.tuple.dst_port),
        (client, 40_000)
    );
    assert!(checksums_ok(&back.data));
    // the client's next packets leave B with A's address and port
    let ack = frame("tcp", client, 40_000, server, 80, TcpFlags::ACK, b"GET /");
    let (v, fwd) = run(&mut b, &mut sb, ack, 79_000_000);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(
        (fwd.info.tuple.src, fwd.info.tuple.src_port),
        (ext, ext_port)
    );
    assert!(checksums_ok(&fwd.data));
    assert_eq!(
        sb.iter().map(|sh| sh.table.stats().inserted).sum::<u64>(),
        1,
        "B made no entry but the installed one"
    );
    // B lent none of its own ports, and gives none back when the copy expires
    assert_eq!(sb.iter().map(in_use).sum::<u64>(), 0);
    for sh in &mut sb {
        b.expire(sh, 79_000_000 + 6 * 86_400 * 1_000_000_000);
    }
    assert_eq!(sb[s].table.len(), 0);
    assert_eq!(sb.iter().map(in_use).sum::<u64>(), 0);
    // a fresh connection at B still maps into B's own pool
    let syn2 = frame("tcp", client, 40_001, server, 80, TcpFlags::SYN, b"");
    let (v, out2) = run(&mut b, &mut sb, syn2, 80_000_000);
    assert_eq!(v, Verdict::Forward);
    let IpAddr::V4(e2) = out2.info.tuple.src else {
        unreachable!()
    };
    assert!((32..48).contains(&e2.octets()[3]), "{e2}");
}

#[test]
fn mappings_taken_back_on_the_same_address_keep_their_ports() {
    // node A made 40 mappings, then died; A' (same pool, empty) gets them back
    let (mut a, mut sa) = chain(&fw_nat(STEERING, "203.0.113.16/28", ""));
    let (mut b, mut sb) = chain(&fw_nat(STEERING, "203.0.113.16/28", ""));
    let (client, server) = (v4([10, 0, 0, 2]), v4([198, 51, 100, 2]));
    let mut taken = std::collections::HashSet::new();
    for port in 0..40u16 {
        let syn = frame("tcp", client, 40_000 + port, server, 80, TcpFlags::SYN, b"");
        let (v, out) = run(&mut a, &mut sa, syn, 1_000_000);
        assert_eq!(v, Verdict::Forward);
        let s = a.shard_of(out.hash);
        let bytes = a.export(&sa[s], out.entry.unwrap(), 1_000_000);
        // twice: a bulk copy after a live one replaces it, reserving once
        for _ in 0..2 {
            b.install(&mut sb[s], &bytes, 2_000_000).unwrap();
        }
        taken.insert((out.info.tuple.src, out.info.tuple.src_port));
    }
    assert_eq!(sb.iter().map(in_use).sum::<u64>(), 40);
    // A' makes new connections: none reuses a mapping it took back (a fresh
    // pool would hand out exactly A's first ports again)
    for port in 0..200u16 {
        let syn = frame("tcp", client, 50_000 + port, server, 80, TcpFlags::SYN, b"");
        let (v, out) = run(&mut b, &mut sb, syn, 3_000_000);
        assert_eq!(v, Verdict::Forward);
        let m = (out.info.tuple.src, out.info.tuple.src_port);
        assert!(!taken.contains(&m), "{m:?} handed out twice");
    }
    assert_eq!(sb.iter().map(in_use).sum::<u64>(), 240);
    let conflicts: u64 = b
        .nfs()
        .iter()
        .flat_map(|n| n.counters())
        .filter(|(k, _)| *k == "adopt_conflicts")
        .map(|(_, v)| v)
        .sum();
    assert_eq!(conflicts, 0);
    // they go back to the pool when they expire
    for sh in &mut sb {
        b.expire(sh, 4_000_000 + 6 * 86_400 * 1_000_000_000);
    }
    assert_eq!(sb.iter().map(in_use).sum::<u64>(), 0);
}

#[test]
fn what_cannot_travel_is_named_and_bad_bytes_refused() {
    let (mut b, mut sb) = chain(&fw_nat(STEERING, "203.0.113.32/28", ""));
    for bad in [
        &b""[..],
        &[0xff; 7][..],
        &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12][..],
    ] {
        assert!(matches!(
            b.install(&mut sb[0], bad, 0),
            Err(InstallError::Malformed(_))
        ));
    }
    // an image of a chain with another number of NFs
    let (mut one, mut s1) = chain(&format!("{STEERING}\n[[nf]]\nkind = \"seqcheck\"\n"));
    let p = frame(
        "udp",
        v4([10, 0, 0, 2]),
        5,
        v4([10, 0, 0, 3]),
        6,
        TcpFlags::default(),
        b"x",
    );
    let (_, out) = run(&mut one, &mut s1, p, 0);
    let s = one.shard_of(out.hash);
    let bytes = one.export(&s1[s], out.entry.unwrap(), 0);
    assert!(matches!(
        b.install(&mut sb[s], &bytes, 0),
        Err(InstallError::Malformed(m)) if m.contains("1 slots for a chain of 2")
    ));
    let (ids, _) = chain(&format!(
        "{STEERING}\n[[nf]]\nkind = \"ids\"\nrules = \"alert tcp any any -> any any (content:\\\"x\\\"; sid:1;)\"\n"
    ));
    let e = ids.portable().unwrap_err();
    assert!(e.contains("`ids`"), "{e}");
}
