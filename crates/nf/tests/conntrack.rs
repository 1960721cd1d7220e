//! The firewall's connection tracking across a connection's lifetime: a new
//! connection on a closed one's tuple is a new connection — judged by the
//! rules as they are now, and counted as opened.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use common::{chain, frame, run};
use nf::{ChainConfig, DropCause, Verdict};
use wire::TcpFlags;

fn firewall(rules: &str) -> String {
    format!("[steering]\nshards = 1\n[[nf]]\nkind = \"firewall\"\nrules = \"{rules}\"\n")
}

fn opened(c: &nf::Chain) -> (u64, u64) {
    let k = c.nfs()[0].counters();
    let get = |n: &str| k.iter().find(|(x, _)| *x == n).map_or(0, |(_, v)| *v);
    (get("opened"), get("denied"))
}

#[test]
fn a_new_connection_on_a_closed_tuple_is_judged_by_the_rules_of_now() {
    let (mut c, mut s) = chain(&firewall("allow tcp 10.0.0.0/8 -> any"));
    let (client, server) = (
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2)),
    );
    let out = |c: &mut nf::Chain, s: &mut [nf::Shard], f: TcpFlags| {
        run(c, s, frame("tcp", client, 40_000, server, 80, f, b""), 0).0
    };
    let back = |c: &mut nf::Chain, s: &mut [nf::Shard], f: TcpFlags| {
        run(c, s, frame("tcp", server, 80, client, 40_000, f, b""), 0).0
    };
    let connection = |c: &mut nf::Chain, s: &mut [nf::Shard]| {
        assert_eq!(out(c, s, TcpFlags::SYN), Verdict::Forward);
        assert_eq!(back(c, s, TcpFlags::SYN | TcpFlags::ACK), Verdict::Forward);
        assert_eq!(out(c, s, TcpFlags::ACK), Verdict::Forward);
        assert_eq!(out(c, s, TcpFlags::FIN | TcpFlags::ACK), Verdict::Forward);
        assert_eq!(back(c, s, TcpFlags::FIN | TcpFlags::ACK), Verdict::Forward);
        assert_eq!(out(c, s, TcpFlags::ACK), Verdict::Forward);
    };
    // two connections on one tuple, the second in the first's TIME_WAIT:
    // two opened
    connection(&mut c, &mut s);
    connection(&mut c, &mut s);
    assert_eq!(opened(&c), (2, 0));
    // the rules change: the next connection on the tuple is refused, as a
    // new one from anywhere would be
    let deny = ChainConfig::from_toml(&firewall("deny tcp any -> any"))
        .unwrap()
        .build(Path::new("."))
        .unwrap();
    c.reload_nfs(&deny, &[0]).unwrap();
    assert_eq!(
        out(&mut c, &mut s, TcpFlags::SYN),
        Verdict::Drop(DropCause::Policy)
    );
    assert_eq!(opened(&c), (2, 1));
}
