//! The UPF: uplink decapsulation and downlink encapsulation byte for byte,
//! a session's life over PFCP against the running UPF (association,
//! establishment with a TEID the UPF chooses, buffer then release on a FAR
//! change, drop, a closed gate, a rate limit, usage counts in the deletion
//! report, the refusals), and the exchange and the tunnels as tshark
//! dissects them.

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use common::{chain, checksums_ok, frame, run};
use nf::upf::pfcp::client::Smf;
use nf::upf::pfcp::codec::QerSpec;
use nf::upf::rules::{Action, Far, Interface, Pdr};
use nf::upf::sdf::SdfFilter;
use nf::upf::Upf;
use nf::{Chain, DropCause, Packet, Shard, Verdict};
use wire::gtpu::{self, Gtpu};
use wire::TcpFlags;

const N3: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const GNB: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 1);
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

fn ip(a: Ipv4Addr) -> IpAddr {
    IpAddr::V4(a)
}

/// The UE's TCP segment to the server, `len` bytes of payload.
fn from_ue(sport: u16, len: usize) -> Vec<u8> {
    frame(
        "tcp",
        ip(UE),
        sport,
        ip(SERVER),
        80,
        TcpFlags::ACK,
        &vec![b'u'; len],
    )
}

/// The server's segment to the UE.
fn to_ue(dport: u16, len: usize) -> Vec<u8> {
    frame(
        "tcp",
        ip(SERVER),
        80,
        ip(UE),
        dport,
        TcpFlags::ACK,
        &vec![b'd'; len],
    )
}

/// `inner` as the gNB tunnels it to the UPF with `teid`.
fn tunnelled(inner: &[u8], teid: u32) -> Vec<u8> {
    let mut f = inner.to_vec();
    let end = f.len();
    let outer = gtpu::Outer {
        src: GNB,
        dst: N3,
        teid,
        qfi: Some(9),
    };
    gtpu::encap(&mut f, 14, end, &outer);
    f
}

/// The G-PDU's TEID and inner IP packet.
fn untunnel(f: &[u8]) -> (Ipv4Addr, u32, Vec<u8>) {
    let info = wire::parse(f).unwrap();
    let IpAddr::V4(dst) = info.tuple.dst else {
        panic!("not IPv4")
    };
    assert_eq!(info.tuple.dst_port, gtpu::PORT);
    let g = Gtpu::parse(info.payload(f)).unwrap();
    let at = info.payload_offset as usize;
    (
        dst,
        g.teid,
        f[at + g.header_len..at + 8 + g.length].to_vec(),
    )
}

fn counters(c: &Chain) -> HashMap<&'static str, u64> {
    c.nfs()[0].counters().into_iter().collect()
}

const STATIC: &str = r#"
    [[nf]]
    kind = "upf"
    n3 = "192.0.2.1"
    [[nf.session]]
    ue = "10.60.0.1"
    teid = 1
    gnb = "192.0.2.2"
    gnb_teid = 1001
"#;

#[test]
fn uplink_is_decapsulated_and_downlink_encapsulated_byte_for_byte() {
    let (mut c, mut shards) = chain(STATIC);
    let inner = from_ue(40_000, 100);
    let (v, p) = run(&mut c, &mut shards, tunnelled(&inner, 1), 1);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(p.data, inner, "the UE's own frame, tunnel off");
    assert_eq!(p.info.tuple.src, ip(UE), "the metadata follows the bytes");

    let down = to_ue(40_000, 300);
    let (v, p) = run(&mut c, &mut shards, down.clone(), 2);
    assert_eq!(v, Verdict::Forward);
    let (dst, teid, ip_packet) = untunnel(&p.data);
    assert_eq!((dst, teid), (GNB, 1001));
    assert_eq!(ip_packet, down[14..], "the IP packet whole inside");
    assert_eq!(p.info.tuple.src, ip(N3));
    assert!(checksums_ok(&p.data), "outer IPv4 header checksum");

    // unknown TEID, foreign UE, GTP-U signalling, a broken header
    for (f, cause) in [
        (tunnelled(&inner, 2), DropCause::UpfNoSession),
        (
            frame(
                "tcp",
                ip(SERVER),
                80,
                ip(Ipv4Addr::new(10, 60, 0, 9)),
                1,
                TcpFlags::ACK,
                b"x",
            ),
            DropCause::UpfNoSession,
        ),
        (echo_request(), DropCause::UpfSignalling),
        (truncated_gtp(&inner), DropCause::UpfMalformed),
    ] {
        assert_eq!(run(&mut c, &mut shards, f, 3).0, Verdict::Drop(cause));
    }
    let n = counters(&c);
    assert_eq!(
        (
            n["uplink"],
            n["downlink"],
            n["decapsulated"],
            n["encapsulated"]
        ),
        (1, 1, 1, 1)
    );
}

fn echo_request() -> Vec<u8> {
    let mut f = frame(
        "udp",
        ip(GNB),
        gtpu::PORT,
        ip(N3),
        gtpu::PORT,
        TcpFlags::ACK,
        &[0x32, 1, 0, 4, 0, 0, 0, 0, 0, 1, 0, 0],
    );
    fix_udp(&mut f);
    f
}

/// A G-PDU whose length field claims more than the datagram holds.
fn truncated_gtp(inner: &[u8]) -> Vec<u8> {
    let mut f = tunnelled(inner, 1);
    f[42 + 3] = 0xff;
    fix_udp(&mut f);
    f
}

/// A UDP checksum of 0 (none), after the payload was edited.
fn fix_udp(f: &mut [u8]) {
    f[40] = 0;
    f[41] = 0;
}

/// The UPF of `c`.
fn upf(c: &Chain) -> &Upf {
    c.nfs()[0].as_any().downcast_ref::<Upf>().expect("a UPF")
}

fn send(c: &mut Chain, shards: &mut [Shard], f: Vec<u8>, now: u64) -> (Verdict, Packet) {
    run(c, shards, f, now)
}

const PFCP: &str = r#"
    [[nf]]
    kind = "upf"
    n3 = "192.0.2.1"
    pfcp = "127.0.0.1:0"
    qer_burst = 10000
"#;

/// The SMF's rules for the UE: uplink with a TEID the UPF chooses and a web
/// filter at a higher precedence than the catch-all; downlink buffered (the
/// UE is idle); a QER limiting the uplink to 8 Mbit/s; a URR on both.
fn establish(smf: &mut Smf) -> (u64, u32) {
    let r = smf
        .establish(77, |r| {
            r.create_pdr(
                &Pdr {
                    id: 1,
                    precedence: 200,
                    source: Interface::Access,
                    teid: None,
                    ue: Some(UE),
                    sdf: None,
                    remove_outer: true,
                    far: 1,
                    qers: vec![1],
                    urrs: vec![1],
                },
                Some(1),
            )
            .create_pdr(
                &Pdr {
                    id: 3,
                    precedence: 100,
                    source: Interface::Access,
                    teid: None,
                    ue: Some(UE),
                    sdf: Some(SdfFilter::parse("permit out 6 from any 443 to assigned").unwrap()),
                    remove_outer: true,
                    far: 3,
                    qers: vec![],
                    urrs: vec![1],
                },
                Some(1),
            )
            .create_pdr(
                &Pdr {
                    id: 2,
                    precedence: 100,
                    source: Interface::Core,
                    teid: None,
                    ue: Some(UE),
                    sdf: None,
                    remove_outer: false,
                    far: 2,
                    qers: vec![],
                    urrs: vec![1],
                },
                None,
            )
            .create_far(&Far {
                id: 1,
                action: Action::Forward,
                tunnel: None,
            })
            .create_far(&Far {
                id: 3,
                action: Action::Drop,
                tunnel: None,
            })
            .create_far(&Far {
                id: 2,
                action: Action::Buffer,
                tunnel: None,
            })
            .create_qer(&QerSpec {
                id: 1,
                ul_open: true,
                dl_open: true,
                mbr: Some((8_000, 0)),
                qfi: Some(9),
            })
            .create_urr(1);
        })
        .unwrap();
    assert!(r.accepted(), "{r:?}");
    let seid = r.seid.expect("the UPF's F-SEID");
    // both uplink PDRs asked for a TEID under one CHID: the same one
    assert_eq!(r.created.len(), 2, "{r:?}");
    assert_eq!(r.created[0].1, r.created[1].1);
    let teid = r.created.iter().find(|c| c.0 == 1).unwrap().1;
    (seid, teid)
}

#[test]
fn a_session_over_pfcp_buffers_releases_drops_limits_and_reports_its_usage() {
    let (mut c, mut shards) = chain(PFCP);
    // the endpoint on a socket of its own, as `flowshift run` gives it
    let (at, mut endpoint) = upf(&c).pfcp_endpoint().expect("a PFCP address");
    let server =
        netio::responder::Responder::start(at, "pfcp", move |b, from| endpoint.answer(b, from))
            .unwrap();
    let mut smf = Smf::new(server.local_addr(), Ipv4Addr::LOCALHOST).unwrap();
    smf.log = Some(Vec::new());

    // no session before an association
    let r = smf.establish(1, |r| {
        r.create_urr(1);
    });
    assert_eq!(r.unwrap().cause, 72, "no association");
    assert!(smf.heartbeat().unwrap().seid.is_none());
    assert!(smf.associate().unwrap().accepted());
    let (seid, teid) = establish(&mut smf);

    // downlink while the UE is idle: held, in order
    let mut sent_down = Vec::new();
    for i in 0..5u16 {
        let f = to_ue(50_000 + i, 100);
        sent_down.push(f[14..].to_vec());
        let (v, _) = send(&mut c, &mut shards, f, 10);
        assert_eq!(v, Verdict::Drop(DropCause::UpfBuffered));
    }
    let mut out = Vec::new();
    c.take_released(&mut out);
    assert!(out.is_empty(), "nothing leaves while the FAR buffers");

    // the UE is paged and answers: the SMF points the FAR at its gNB
    let r = smf
        .modify(seid, |r| {
            r.update_far(&Far {
                id: 2,
                action: Action::Forward,
                tunnel: Some((2002, GNB)),
            });
        })
        .unwrap();
    assert!(r.accepted(), "{r:?}");
    c.take_released(&mut out);
    assert_eq!(out.len(), 5, "every held packet, once");
    for (p, sent) in out.iter().zip(&sent_down) {
        let (dst, t, inner) = untunnel(&p.data);
        assert_eq!((dst, t), (GNB, 2002));
        assert_eq!(&inner, sent, "in the order they came");
    }
    // and the next downlink packet goes straight through
    let (v, p) = send(&mut c, &mut shards, to_ue(50_000, 10), 11);
    assert_eq!(v, Verdict::Forward);
    let (_, t, _) = untunnel(&p.data);
    assert_eq!(t, 2002);

    // uplink on the chosen TEID: the web filter's FAR drops port-443 replies,
    // the catch-all forwards
    let https = frame("tcp", ip(UE), 40_000, ip(SERVER), 443, TcpFlags::ACK, b"x");
    let (v, _) = send(&mut c, &mut shards, tunnelled(&https, teid), 12);
    assert_eq!(
        v,
        Verdict::Drop(DropCause::UpfFarDrop),
        "precedence 100 wins"
    );

    // 8 Mbit/s = 1 000 bytes per ms, 10 000 bytes of burst: 30 packets of
    // 1 040 bytes at once, then the rate
    let verdicts: Vec<Verdict> = (0..30)
        .map(|_| {
            send(
                &mut c,
                &mut shards,
                tunnelled(&from_ue(40_001, 1_000), teid),
                1_000_000,
            )
            .0
        })
        .collect();
    let passed = verdicts.iter().filter(|v| **v == Verdict::Forward).count();
    assert!(
        (9..=11).contains(&passed),
        "{passed} of 30 within the burst"
    );
    assert!(verdicts[passed..]
        .iter()
        .all(|v| *v == Verdict::Drop(DropCause::UpfRateLimited)));
    // 10 ms later, 10 packets' worth more
    let later = (0..30)
        .filter(|_| {
            send(
                &mut c,
                &mut shards,
                tunnelled(&from_ue(40_001, 1_000), teid),
                11_000_000,
            )
            .0 == Verdict::Forward
        })
        .count();
    assert!((9..=11).contains(&later), "{later}");

    // close the uplink gate
    let r = smf
        .modify(seid, |r| {
            r.create_qer(&QerSpec {
                id: 1,
                ul_open: false,
                dl_open: true,
                mbr: None,
                qfi: None,
            });
        })
        .unwrap();
    assert!(r.accepted(), "{r:?}");
    let (v, _) = send(
        &mut c,
        &mut shards,
        tunnelled(&from_ue(40_002, 10), teid),
        20_000_000,
    );
    assert_eq!(v, Verdict::Drop(DropCause::UpfGateClosed));

    // what the URR saw: the delayed merge (one core here) publishes it
    let share = c.share();
    c.merge_shared(&[share]);
    let r = smf.delete(seid).unwrap();
    assert!(r.accepted(), "{r:?}");
    let (urr, vol) = r.usage[0];
    assert_eq!(urr, 1);
    // downlink: 5 buffered + 1 (100- and 10-byte payloads over 40 bytes of headers)
    assert_eq!(vol.dl_packets, 6);
    assert_eq!(vol.dl_bytes, 5 * 140 + 50);
    // uplink: the dropped https packet counts (detected and measured before
    // its FAR), the rate-limited ones and the gated one do not
    assert_eq!(vol.ul_packets, 1 + (passed + later) as u64);
    assert_eq!(vol.ul_bytes, 41 + (passed + later) as u64 * 1_040);

    // gone: packets and requests both
    let (v, _) = send(
        &mut c,
        &mut shards,
        tunnelled(&from_ue(40_001, 10), teid),
        30_000_000,
    );
    assert_eq!(v, Verdict::Drop(DropCause::UpfNoSession));
    assert_eq!(
        smf.delete(seid).unwrap().cause,
        65,
        "session context not found"
    );
    // a PDR naming a FAR that is not there
    let r = smf
        .establish(78, |r| {
            r.create_pdr(
                &Pdr {
                    id: 1,
                    precedence: 1,
                    source: Interface::Core,
                    teid: None,
                    ue: Some(UE),
                    sdf: None,
                    remove_outer: false,
                    far: 9,
                    qers: vec![],
                    urrs: vec![],
                },
                None,
            );
        })
        .unwrap();
    assert_eq!(r.cause, 73, "rule creation failure");
    let n = counters(&c);
    assert_eq!((n["buffered"], n["released"], n["held"]), (5, 5, 0));

    tshark_reads_the_exchange(&smf.log.take().unwrap(), &out);
}

/// tshark dissects every PFCP message with its type and cause, and the
/// released G-PDUs with their TEID and inner packet, without an error.
fn tshark_reads_the_exchange(log: &[(bool, Vec<u8>)], released: &[Packet]) {
    let dir = std::env::temp_dir().join(format!("flowshift-upf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("n4-n3.pcap");
    let smf = ip(Ipv4Addr::new(192, 0, 2, 100));
    let upf = ip(N3);
    let mut frames: Vec<(u64, Vec<u8>)> = log
        .iter()
        .enumerate()
        .map(|(i, (req, m))| {
            let (s, d) = if *req { (smf, upf) } else { (upf, smf) };
            (i as u64, frame("udp", s, 8805, d, 8805, TcpFlags::ACK, m))
        })
        .collect();
    let n = frames.len() as u64;
    frames.extend(
        released
            .iter()
            .enumerate()
            .map(|(i, p)| (n + i as u64, p.data.clone())),
    );
    trace::write_pcap(&path, frames).unwrap();
    let rows = trace::tshark::dissect(
        &path,
        &["gtp", "pfcp"],
        &[
            "pfcp.msg_type",
            "pfcp.cause",
            "gtp.teid",
            "ip.src",
            "_ws.expert.severity",
            "_ws.malformed",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(rows.len(), log.len() + released.len());
    for (i, r) in rows.iter().enumerate() {
        assert!(r[5].is_empty(), "packet {}: malformed: {r:?}", i + 1);
        // (severity 8388608 is an error)
        assert!(
            !r[4].split(',').any(|s| s == "8388608"),
            "packet {}: {r:?}",
            i + 1
        );
    }
    let types: Vec<&str> = rows[..log.len()].iter().map(|r| r[0].as_str()).collect();
    for t in ["1", "2", "5", "6", "50", "51", "52", "53", "54", "55"] {
        assert!(
            types.contains(&t),
            "PFCP message type {t} dissected: {types:?}"
        );
    }
    for r in &rows[log.len()..] {
        assert_eq!(r[2], "0x000007d2", "the gNB's TEID: {r:?}");
        assert!(r[3].contains("198.51.100.7"), "the inner source: {r:?}");
    }
}

#[test]
fn a_connection_is_one_flow_for_steering_in_and_out_of_the_tunnel() {
    let (c, _) = chain(STATIC);
    let mut buckets = std::collections::HashSet::new();
    for port in 40_000..40_064u16 {
        let up = c.packet(tunnelled(&from_ue(port, 10), 1), 1).unwrap();
        let down = c.packet(to_ue(port, 10), 1).unwrap();
        assert_eq!(
            up.hash, down.hash,
            "port {port}: the tuple inside is hashed"
        );
        buckets.insert(c.shard_of(up.hash));
    }
    assert!(buckets.len() > 8, "one gNB's uplink spreads: {buckets:?}");
}

/// Merged accounting over two cores: each counts its own packets of one
/// URR; after a merge the view PFCP reports from holds their sum, by the
/// URR's slot; a session not in the table reports nothing.
#[test]
fn merged_usage_sums_every_cores_counts_of_a_urr() {
    let r = gtpu::UeRange::new(2);
    let (ue, teid, _) = r.ue(1);
    let toml = format!(
        "[[nf]]\nkind = \"upf\"\nn3 = \"{}\"\naccounting = \"merged\"\n[nf.ues]\ncount = 2\n",
        gtpu::UeRange::N3
    );
    let (proto, _) = chain(&toml);
    let (mut a, mut b) = (proto.instance(), proto.instance());
    let (mut sa, mut sb) = (a.new_shards(), b.new_shards());
    let pkt = |len: usize| {
        let inner = frame(
            "udp",
            ip(ue),
            40_000,
            ip(SERVER),
            53,
            TcpFlags::default(),
            &vec![0; len],
        );
        let mut f = inner.clone();
        let end = f.len();
        let outer = gtpu::Outer {
            src: r.gnb,
            dst: gtpu::UeRange::N3,
            teid,
            qfi: None,
        };
        gtpu::encap(&mut f, 14, end, &outer);
        (f, inner.len() as u64 - 14)
    };
    let mut bytes = 0;
    for i in 0..10 {
        let (f, n) = pkt(100 + i);
        let (v, _) = if i % 3 == 0 {
            send(&mut b, &mut sb, f, 0)
        } else {
            send(&mut a, &mut sa, f, 0)
        };
        assert_eq!(v, Verdict::Forward);
        bytes += n;
    }
    let shared = upf(&a).shared().clone();
    let seid = 2; // UE 1's session
    let merged = nf::upf::Accounting::Merged;
    assert_eq!(
        shared.volume(merged, seid, 1).ul_packets,
        0,
        "before a merge"
    );
    let board = [a.share(), b.share()];
    a.merge_shared(&board);
    let v = shared.volume(merged, seid, 1);
    assert_eq!((v.ul_packets, v.ul_bytes, v.dl_packets), (10, bytes, 0));
    assert_eq!(
        shared.volume(merged, 1, 1).ul_packets,
        0,
        "UE 0 sent nothing"
    );
    assert_eq!(shared.volume(merged, 9, 1).ul_packets, 0, "no such session");
}
