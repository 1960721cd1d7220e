//! A flow entry as `ctl flows` shows it (both tuples, each NF's state and
//! time left) and as `ctl flows delete` removes it (state released as expiry
//! releases it: the NAT's port goes back, the next packet is a new flow's or
//! an unsolicited one's).

mod common;

use std::net::IpAddr;

use common::{chain, frame, run};
use nf::{DropCause, Verdict};
use state::EntryId;
use wire::TcpFlags;

const TOML: &str = r#"
    [steering]
    buckets = 64
    shards = 1
    [[nf]]
    kind = "firewall"
    rules = "allow tcp 10.0.0.0/8 -> any"
    [[nf]]
    kind = "nat"
    internal = "10.0.0.0/8"
    external = ["203.0.113.7"]
"#;

fn syn(src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> Vec<u8> {
    frame("tcp", src, sport, dst, dport, TcpFlags::SYN, b"")
}

#[test]
fn a_nated_flow_shows_both_tuples_and_deleting_it_frees_its_port() {
    let (mut c, mut shards) = chain(TOML);
    let (client, server) = (IpAddr::from([10, 0, 0, 2]), IpAddr::from([192, 0, 2, 1]));
    let (v, p) = run(&mut c, &mut shards, syn(client, 40_000, server, 80), 1_000);
    assert_eq!(v, Verdict::Forward);
    let out_tuple = p.info.tuple;
    let ids: Vec<EntryId> = shards[0].table.entries().collect();
    assert_eq!(ids.len(), 1);
    // seen 2 s after it was made (ages are kept to 2²⁶ ns, 67 ms)
    let view = c.view(&shards[0], ids[0], 1_000 + 2_000_000_000);
    assert_eq!(
        (
            view.orig.src,
            view.orig.src_port,
            view.orig.dst,
            view.orig.dst_port
        ),
        (client, 40_000, server, 80)
    );
    let t = view.translated.expect("the NAT's mapping");
    assert_eq!(t, out_tuple, "the tuple that left the chain");
    assert_eq!(t.src, IpAddr::from([203, 0, 113, 7]));
    let names: Vec<&str> = view.nfs.iter().map(|n| n.nf.as_str()).collect();
    assert_eq!(names, ["firewall", "nat"]);
    assert!(view.nfs.iter().all(|n| n.state.is_some() && n.left_ns > 0));
    // the tuples a filter is judged on, without a view built
    assert_eq!(shards[0].table.tuples(ids[0]), (view.orig, Some(t)));
    assert!(!view.assured && !view.offloaded);
    assert!(
        (2_000_000_000..2_000_000_000 + (1 << 26)).contains(&view.age_ns),
        "made at 1 µs, seen 2 s later: {}",
        view.age_ns
    );

    assert!(c.delete(&mut shards[0], ids[0]));
    assert_eq!(shards[0].table.len(), 0);
    assert!(!c.delete(&mut shards[0], ids[0]), "a deleted entry is gone");
    match &shards[0].locals[1] {
        nf::ShardLocal::NatPool(pool) => assert_eq!(pool.in_use(), 0, "port returned"),
        _ => unreachable!(),
    }
    // the server's answer to the deleted connection is unsolicited: the
    // firewall's rules allow only what the inside opens
    let ack = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
    let reply = frame("tcp", t.dst, t.dst_port, t.src, t.src_port, ack, b"");
    let (v, _) = run(&mut c, &mut shards, reply, 3_000);
    assert_eq!(v, Verdict::Drop(DropCause::Policy));
    // the client's next packet is a new flow's first
    let (v, _) = run(&mut c, &mut shards, syn(client, 40_000, server, 80), 4_000);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(shards[0].table.len(), 1);
}
