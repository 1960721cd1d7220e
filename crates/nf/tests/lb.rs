//! The L4 load balancer in a chain: Maglev placement with even shares, both
//! directions rewritten with valid checksums (tshark agrees), replies found in
//! the forward flow's shard, connections pinned across health changes made while
//! another thread processes traffic, drops with their cause, config errors named.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{chain, checksums_ok, frame, run};
use nf::lb::Lb;
use nf::{Chain, ChainConfig, DropCause, Nf, Shard, Verdict};
use wire::TcpFlags;

const CFG: &str = r#"
[steering]
shards = 16
[[nf]]
kind = "lb"
snat = ["192.0.2.10", "192.0.2.11"]
[[nf.service]]
vip = "10.0.0.100:80"
backends = ["10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080", "10.1.0.4:8080"]
[[nf.service]]
vip = "10.0.0.100:53"
proto = "udp"
backends = ["10.2.0.1:53"]
"#;

const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 100);

fn client(i: u32) -> (IpAddr, u16) {
    (
        IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i / 16)),
        1024 + (i % 16) as u16 * 1000 + (i % 7) as u16,
    )
}

fn lb(c: &Chain) -> &Lb {
    c.nfs()[0].as_any().downcast_ref::<Lb>().unwrap()
}

/// Opens connection `i` (a SYN to the TCP service); returns the backend and the
/// balancer's source port it was given.
fn open(c: &mut Chain, s: &mut [Shard], i: u32) -> (Verdict, IpAddr, u16, u16) {
    let (a, p) = client(i);
    let f = frame("tcp", a, p, IpAddr::V4(VIP), 80, TcpFlags::SYN, b"");
    let (v, out) = run(c, s, f, 0);
    let t = out.info.tuple;
    (v, t.dst, t.dst_port, t.src_port)
}

#[test]
fn places_by_maglev_and_rewrites_both_directions() {
    let (mut c, mut s) = chain(CFG);
    let mut out = Vec::new();
    let mut per = BTreeMap::new();
    for i in 0..4000 {
        let (a, p) = client(i);
        let f = frame("tcp", a, p, IpAddr::V4(VIP), 80, TcpFlags::SYN, b"");
        let (v, fwd) = run(&mut c, &mut s, f, 0);
        assert_eq!(v, Verdict::Forward);
        let t = fwd.info.tuple;
        assert!(checksums_ok(&fwd.data), "forward checksums");
        let IpAddr::V4(snat) = t.src else { panic!() };
        assert!(snat == Ipv4Addr::new(192, 0, 2, 10) || snat == Ipv4Addr::new(192, 0, 2, 11));
        assert_eq!(t.dst_port, 8080);
        *per.entry(t.dst).or_insert(0u32) += 1;
        // the backend answers the balancer: found in this same shard (`run` picks
        // the shard by the reply's own hash), rewritten back to VIP → client
        let r = frame(
            "tcp",
            t.dst,
            t.dst_port,
            t.src,
            t.src_port,
            TcpFlags::SYN | TcpFlags::ACK,
            b"hello",
        );
        let (v, back) = run(&mut c, &mut s, r, 0);
        assert_eq!(v, Verdict::Forward, "reply of connection {i}");
        let b = back.info.tuple;
        assert_eq!((b.src, b.src_port), (IpAddr::V4(VIP), 80));
        assert_eq!((b.dst, b.dst_port), (a, p));
        assert!(checksums_ok(&back.data), "reply checksums");
        if i < 50 {
            out.push((0u64, fwd.data));
            out.push((0u64, back.data));
        }
    }
    // four backends, M = 65 537: each gets a quarter of the connections
    assert_eq!(per.len(), 4);
    for (b, n) in &per {
        assert!((900..=1100).contains(n), "{b}: {n} of 4000");
    }
    let placed: u64 = lb(&c).placed_per_backend()[0].iter().sum();
    assert_eq!(placed, 4000);
    let k: BTreeMap<_, _> = c.nfs()[0].counters().into_iter().collect();
    assert_eq!(
        (k["placed"], k["forward"], k["replies"]),
        (4000, 4000, 4000)
    );
    // UDP service
    let f = frame(
        "udp",
        client(1).0,
        5555,
        IpAddr::V4(VIP),
        53,
        TcpFlags::default(),
        b"q",
    );
    let (v, p) = run(&mut c, &mut s, f, 0);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(p.info.tuple.dst, "10.2.0.1".parse::<IpAddr>().unwrap());
    assert!(checksums_ok(&p.data));
    out.push((0, p.data));
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lb-out.pcap");
    trace::write_pcap(&path, out.iter().map(|(t, f)| (*t, &f[..]))).unwrap();
    let r = trace::tshark::validate(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (r.packets, r.bad_checksums, r.errors),
        (101, 0, 0),
        "{:?}",
        r.samples
    );
}

#[test]
fn drops_carry_their_cause() {
    let (mut c, mut s) = chain(CFG);
    let cases = [
        // a VIP port nobody serves
        (
            frame(
                "tcp",
                client(0).0,
                1,
                IpAddr::V4(VIP),
                443,
                TcpFlags::SYN,
                b"",
            ),
            DropCause::LbNoService,
        ),
        // the TCP service's port over UDP
        (
            frame(
                "udp",
                client(0).0,
                1,
                IpAddr::V4(VIP),
                80,
                TcpFlags::default(),
                b"",
            ),
            DropCause::LbNoService,
        ),
        // to the balancer's own address, no connection
        (
            frame(
                "tcp",
                "10.1.0.1".parse().unwrap(),
                8080,
                "192.0.2.10".parse().unwrap(),
                4000,
                TcpFlags::ACK,
                b"",
            ),
            DropCause::LbNoConnection,
        ),
    ];
    for (f, want) in cases {
        assert_eq!(run(&mut c, &mut s, f, 0).0, Verdict::Drop(want));
    }
    // not for a service: passed untouched
    let f = frame(
        "tcp",
        client(0).0,
        1,
        "10.9.9.9".parse().unwrap(),
        80,
        TcpFlags::SYN,
        b"",
    );
    let (v, p) = run(&mut c, &mut s, f.clone(), 0);
    assert_eq!((v, &p.data), (Verdict::Forward, &f));
    // every backend down: new connections are refused with their cause
    let ctl = lb(&c).control();
    for b in 0..4 {
        ctl.set_healthy(0, b, false).unwrap();
    }
    assert_eq!(
        open(&mut c, &mut s, 7).0,
        Verdict::Drop(DropCause::LbNoBackend)
    );
    assert!(ctl.set_healthy(0, 9, true).is_err());
    assert!(ctl.set_healthy(5, 0, true).is_err());
}

#[test]
fn health_changes_never_move_established_connections() {
    let (mut c, mut s) = chain(CFG);
    let mut first = HashMap::new();
    for i in 0..2000 {
        let (v, b, _, _) = open(&mut c, &mut s, i);
        assert_eq!(v, Verdict::Forward);
        first.insert(i, b);
    }
    let ctl = lb(&c).control();
    let (svc, down) = ctl.find("10.0.0.100:80", "10.1.0.3:8080").unwrap();
    let changed = ctl.set_healthy(svc, down, false).unwrap();
    // Maglev: the down backend's quarter moves, little else (table entries)
    assert!(
        (16_384..=16_384 + 3_000).contains(&changed),
        "{changed} of 65 537 entries changed"
    );
    let gone: IpAddr = "10.1.0.3".parse().unwrap();
    // established connections (later packets) keep their backend, even the
    // down one's
    for i in 0..2000 {
        let (a, p) = client(i);
        let f = frame("tcp", a, p, IpAddr::V4(VIP), 80, TcpFlags::ACK, b"data");
        let (v, out) = run(&mut c, &mut s, f, 0);
        assert_eq!(v, Verdict::Forward);
        assert_eq!(out.info.tuple.dst, first[&i], "connection {i} moved");
    }
    // new connections avoid it; those that would have gone elsewhere still do
    let (mut fresh, mut fresh_s) = chain(CFG);
    let mut moved_elsewhere = 0;
    for i in 2000..4000 {
        let (v, b, _, _) = open(&mut c, &mut s, i);
        assert_eq!(v, Verdict::Forward);
        assert_ne!(b, gone, "new connection {i} on the down backend");
        let (_, before, _, _) = open(&mut fresh, &mut fresh_s, i);
        if before != gone && before != b {
            moved_elsewhere += 1;
        }
    }
    assert!(
        moved_elsewhere < 2000 / 20,
        "{moved_elsewhere} moved between live backends"
    );
    // back up: new connections reach it again
    ctl.set_healthy(svc, down, true).unwrap();
    let back = (4000..4400)
        .filter(|&i| open(&mut c, &mut s, i).1 == gone)
        .count();
    assert!(
        (60..=140).contains(&back),
        "{back} of 400 on the restored backend"
    );
}

/// A worker thread opening 4 000 connections (500 at a time, each sent again in
/// later rounds) until `stop` and at least 8 rounds: asserts that no connection
/// ever changes backend; returns the connections, those refused for want of a
/// backend, and the chain.
fn traffic(
    c: Chain,
    s: Vec<Shard>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(usize, u64, Chain)> {
    std::thread::spawn(move || {
        let (mut c, mut s) = (c, s);
        let mut pinned: HashMap<u32, IpAddr> = HashMap::new();
        let mut round = 0u32;
        let mut no_backend = 0u64;
        // Relaxed: the flag only ends the loop; no data is published by it
        while !stop.load(Ordering::Relaxed) || round < 8 {
            for i in 0..500u32 {
                let id = i + 500 * (round % 8);
                let flags = if pinned.contains_key(&id) {
                    TcpFlags::ACK
                } else {
                    TcpFlags::SYN
                };
                let (a, p) = client(id);
                let f = frame("tcp", a, p, IpAddr::V4(VIP), 80, flags, b"x");
                let (v, out) = run(&mut c, &mut s, f, 0);
                match v {
                    Verdict::Forward => {
                        let b = *pinned.entry(id).or_insert(out.info.tuple.dst);
                        assert_eq!(b, out.info.tuple.dst, "a connection moved");
                    }
                    Verdict::Drop(DropCause::LbNoBackend) => no_backend += 1,
                    v => panic!("{v:?}"),
                }
            }
            round += 1;
        }
        (pinned.len(), no_backend, c)
    })
}

/// The control side flips backends while a worker thread processes traffic:
/// the packet path never waits, every connection stays on its first backend,
/// and no packet is lost or misrouted.
#[test]
fn health_flips_while_traffic_flows() {
    let (c, s) = chain(CFG);
    let ctl = lb(&c).control();
    let stop = Arc::new(AtomicBool::new(false));
    let worker = traffic(c, s, stop.clone());
    let mut flips = 0;
    for k in 0..200usize {
        ctl.set_healthy(0, k % 4, k % 3 == 0).unwrap();
        flips += 1;
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    let (conns, no_backend, c) = worker.join().unwrap();
    assert_eq!(flips, 200);
    assert_eq!(conns, 4000, "every connection got a backend");
    // never all four down at once with this pattern, so no connection refused
    let health = ctl.services()[0].health();
    assert!(health.iter().any(|h| *h));
    assert_eq!(no_backend, 0);
    assert!(lb(&c)
        .counters()
        .iter()
        .any(|(k, v)| *k == "placed" && *v == 4000));
}

fn counters(c: &Chain) -> BTreeMap<&'static str, u64> {
    lb(c).counters().into_iter().collect()
}

fn placed(placement: &str, extra: &str) -> String {
    let cfg = CFG.replace(
        "snat = [",
        &format!("placement = \"{placement}\"\nsnat = ["),
    );
    format!("{cfg}{extra}")
}

/// GranularNF's control component: a policy request is applied by the data
/// component before its next packet (`inline`) or by the component thread with
/// no packet at all (`core`); either way established connections stay, new ones
/// avoid the down backend, and the counters say where the work ran.
#[test]
fn control_component_applies_requests_where_placed() {
    let gone: IpAddr = "10.1.0.3".parse().unwrap();
    for placement in ["inline", "core"] {
        let (mut c, mut s) = chain(&placed(placement, ""));
        let mut first = HashMap::new();
        for i in 0..400 {
            let (v, b, _, _) = open(&mut c, &mut s, i);
            assert_eq!(v, Verdict::Forward);
            first.insert(i, b);
        }
        assert!(first.values().any(|b| *b == gone));
        let ctl = lb(&c).control();
        assert_eq!(ctl.placement().name(), placement);
        let (svc, down) = ctl.find("10.0.0.100:80", "10.1.0.3:8080").unwrap();
        assert!(ctl.request(9, 0, false).is_err());
        assert!(ctl.request(svc, 9, false).is_err());
        ctl.request(svc, down, false).unwrap();
        if placement == "core" {
            assert!(ctl.wait_idle(Duration::from_secs(10)));
            assert!(
                !ctl.services()[svc].health()[down],
                "core: applied without a packet"
            );
        } else {
            assert_eq!(ctl.pending(), 1);
            assert!(
                ctl.services()[svc].health()[down],
                "inline: waits for the data component"
            );
        }
        for i in 0..400 {
            let (a, p) = client(i);
            let f = frame("tcp", a, p, IpAddr::V4(VIP), 80, TcpFlags::ACK, b"data");
            let (v, out) = run(&mut c, &mut s, f, 0);
            assert_eq!(v, Verdict::Forward);
            assert_eq!(
                out.info.tuple.dst, first[&i],
                "{placement}: connection {i} moved"
            );
        }
        assert!(!ctl.services()[svc].health()[down]);
        assert_eq!(ctl.pending(), 0);
        for i in 400..800 {
            assert_ne!(
                open(&mut c, &mut s, i).1,
                gone,
                "{placement}: new connection {i}"
            );
        }
        let n = counters(&c);
        let (here, other) = if placement == "core" {
            ("control_core", "control_inline")
        } else {
            ("control_inline", "control_core")
        };
        assert_eq!(n["control_requests"], 1);
        assert_eq!((n[here], n[other]), (1, 0), "{n:?}");
        assert!(n[format!("{here}_ns").as_str()] > 0);
        assert_eq!(n["control_failed"], 0);
        assert!(
            (16_384..=16_384 + 3_000).contains(&n["table_entries_moved"]),
            "{n:?}"
        );
    }
}

/// `[[nf.health]]`: policy requests played when the chain's clock reaches `at`,
/// each once, whichever core's instance gets there first.
#[test]
fn health_schedule_plays_at_chain_time() {
    let gone: IpAddr = "10.1.0.3".parse().unwrap();
    let sched = "[[nf.health]]\nat = \"3ms\"\nservice = \"10.0.0.100:80\"\nbackend = \"10.1.0.3:8080\"\nup = true\n\
                 [[nf.health]]\nat = \"1ms\"\nservice = \"10.0.0.100:80\"\nbackend = \"10.1.0.3:8080\"\nup = false\n";
    for placement in ["inline", "core"] {
        let (mut c, mut s) = chain(&placed(placement, sched));
        // a second core's instance of the same chain
        let mut c2 = c.instance();
        let mut s2 = c2.new_shards();
        let on_gone = |c: &mut Chain, s: &mut [Shard], r: std::ops::Range<u32>, now: u64| {
            r.filter(|&i| {
                let (a, p) = client(i);
                let f = frame("tcp", a, p, IpAddr::V4(VIP), 80, TcpFlags::SYN, b"");
                let (v, out) = run(c, s, f, now);
                assert_eq!(v, Verdict::Forward);
                out.info.tuple.dst == gone
            })
            .count()
        };
        let before = on_gone(&mut c, &mut s, 0..400, 999_999);
        assert!((60..=140).contains(&before), "{before} of 400 before 1 ms");
        // the second instance reaches 1 ms first: it issues the request
        let settle = |c: &Chain| assert!(lb(c).wait_idle(Duration::from_secs(10)));
        if placement == "core" {
            on_gone(&mut c2, &mut s2, 400..401, 1_000_000);
            settle(&c2);
        }
        assert_eq!(on_gone(&mut c2, &mut s2, 401..800, 1_500_000), 0);
        assert_eq!(on_gone(&mut c, &mut s, 800..1200, 2_000_000), 0);
        if placement == "core" {
            on_gone(&mut c, &mut s, 1200..1201, 3_000_000);
            settle(&c);
        }
        let back = on_gone(&mut c, &mut s, 1201..1600, 3_500_000);
        assert!((60..=140).contains(&back), "{back} of 399 after 3 ms");
        on_gone(&mut c2, &mut s2, 1600..1700, 4_000_000);
        let mut total = c.instance();
        total.merge_from(&c);
        total.merge_from(&c2);
        let n = counters(&total);
        assert_eq!(n["control_requests"], 2, "each entry issued once: {n:?}");
        assert_eq!(n["control_inline"] + n["control_core"], 2, "{n:?}");
        let want = if placement == "core" { 1700 } else { 1698 };
        assert_eq!(n["placed"], want);
    }
}

/// Policy requests (either placement) while a worker thread processes traffic:
/// the packet path never waits on the control side, no connection moves, every
/// request is applied or still queued — none lost.
#[test]
fn policy_requests_while_traffic_flows() {
    for placement in ["inline", "core"] {
        let (c, s) = chain(&placed(placement, ""));
        let ctl = lb(&c).control();
        let stop = Arc::new(AtomicBool::new(false));
        let worker = traffic(c, s, stop.clone());
        let mut sent = 0u64;
        while sent < 100 {
            // never all four down at once: backend k/2 % 4 down, then up again
            let k = sent as usize;
            if ctl.request(0, (k / 2) % 4, k % 2 == 1).is_ok() {
                sent += 1;
            }
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
        let (conns, no_backend, c) = worker.join().unwrap();
        assert_eq!(
            (conns, no_backend),
            (4000, 0),
            "every connection got a backend"
        );
        assert!(lb(&c).wait_idle(Duration::from_secs(10)) || placement == "inline");
        let n = counters(&c);
        assert_eq!(n["control_requests"], 100);
        assert_eq!(
            n["control_inline"] + n["control_core"] + n["control_pending"],
            100,
            "{placement}: {n:?}"
        );
        assert_eq!(n["control_failed"], 0);
        if placement == "core" {
            assert_eq!(n["control_core"], 100);
        }
    }
}

#[test]
fn config_errors_name_the_field() {
    let base = |extra: &str, svc: &str| {
        format!("[[nf]]\nkind = \"lb\"\nsnat = [\"192.0.2.1\"]\n{extra}[[nf.service]]\n{svc}")
    };
    let ok_svc = "vip = \"10.0.0.1:80\"\nbackends = [\"10.1.0.1:80\", \"10.1.0.2:80\"]\n";
    for (toml, want) in [
        (base("table_size = 65536\n", ok_svc), "nf[0].table_size"),
        (base("table_size = 101\n", ok_svc), "must exceed 100 × 2"),
        (base("ports = \"9-3\"\n", ok_svc), "nf[0].ports"),
        (
            base("", "vip = \"10.0.0.1\"\nbackends = [\"10.1.0.1:80\"]\n"),
            "nf[0].service[0].vip",
        ),
        (
            base(
                "",
                "vip = \"10.0.0.1:80\"\nproto = \"sctp\"\nbackends = [\"10.1.0.1:80\"]\n",
            ),
            "nf[0].service[0].proto",
        ),
        (
            base("", "vip = \"10.0.0.1:80\"\nbackends = []\n"),
            "at least one backend",
        ),
        (
            base(
                "",
                "vip = \"10.0.0.1:80\"\nbackends = [\"10.1.0.1:80\"]\ndown = [\"10.1.0.9:80\"]\n",
            ),
            "nf[0].service[0].down",
        ),
        (
            "[[nf]]\nkind = \"lb\"\nsnat = [\"192.0.2.1\"]\n".to_string(),
            "nf[0].service",
        ),
        (
            base("", &format!("{ok_svc}[[nf.service]]\n{ok_svc}")),
            "served twice",
        ),
        (base("placement = \"gpu\"\n", ok_svc), "nf[0].placement"),
        (base("ring = 0\n", ok_svc), "nf[0].ring"),
        (
            base("", &format!("{ok_svc}[[nf.health]]\nat = \"1s\"\nservice = \"10.0.0.1:81\"\nbackend = \"10.1.0.1:80\"\nup = false\n")),
            "nf[0].health[0]",
        ),
        (
            base("", &format!("{ok_svc}[[nf.health]]\nat = \"1s\"\nservice = \"10.0.0.1:80\"\nbackend = \"10.1.0.7:80\"\nup = false\n")),
            "no backend `10.1.0.7:80`",
        ),
        (
            base("", &format!("{ok_svc}[[nf.health]]\nat = \"soon\"\nservice = \"10.0.0.1:80\"\nbackend = \"10.1.0.1:80\"\nup = false\n")),
            "`soon`",
        ),
    ] {
        let e = ChainConfig::from_toml(&toml)
            .and_then(|c| c.build(std::path::Path::new(".")))
            .err()
            .unwrap_or_else(|| panic!("accepted: {toml}"));
        assert!(e.to_string().contains(want), "`{want}` not in: {e}");
    }
}

/// A live reload changes the services while connections go on: every
/// connection keeps its backend (one taken out of the configuration too,
/// which drains), new connections go only to the listed backends, a
/// service taken out places none, a new one places at once, and a backend
/// listed again takes new connections again.
#[test]
fn a_reload_changes_services_and_connections_keep_their_backends() {
    let (mut c, mut s) = chain(CFG);
    let mut held = Vec::new();
    for i in 0..300 {
        let (v, b, bp, _) = open(&mut c, &mut s, i);
        assert_eq!(v, Verdict::Forward);
        held.push((i, b, bp));
    }
    let reload = |c: &mut Chain, backends: &str, extra: &str| {
        let t = format!(
            "[steering]\nshards = 16\n[[nf]]\nkind = \"lb\"\n\
             snat = [\"192.0.2.10\", \"192.0.2.11\", \"192.0.2.12\"]\n\
             [[nf.service]]\nvip = \"10.0.0.100:80\"\nbackends = [{backends}]\n{extra}"
        );
        let new = ChainConfig::from_toml(&t)
            .unwrap()
            .build(std::path::Path::new("."))
            .unwrap();
        c.reload_nfs(&new, &[0])
    };
    let gone: IpAddr = "10.1.0.3".parse().unwrap();
    let added: IpAddr = "10.1.0.5".parse().unwrap();
    reload(
        &mut c,
        "\"10.1.0.1:8080\", \"10.1.0.2:8080\", \"10.1.0.4:8080\", \"10.1.0.5:8080\"",
        "[[nf.service]]\nvip = \"10.0.0.101:443\"\nbackends = [\"10.3.0.1:443\"]\n",
    )
    .unwrap();
    // every connection's next segment reaches its own backend
    for &(i, b, bp) in &held {
        let (a, p) = client(i);
        let f = frame("tcp", a, p, IpAddr::V4(VIP), 80, TcpFlags::ACK, b"x");
        let (v, out) = run(&mut c, &mut s, f, 1);
        assert_eq!(v, Verdict::Forward, "connection {i}");
        assert_eq!((out.info.tuple.dst, out.info.tuple.dst_port), (b, bp));
    }
    assert!(
        held.iter().any(|h| h.1 == gone),
        "a connection on the removed backend"
    );
    // new connections: the listed backends only, the added one among them
    let mut to = BTreeMap::new();
    for i in 1000..1600 {
        let (v, b, _, _) = open(&mut c, &mut s, i);
        assert_eq!(v, Verdict::Forward);
        *to.entry(b).or_insert(0) += 1;
    }
    assert!(!to.contains_key(&gone) && to.contains_key(&added), "{to:?}");
    // the UDP service is gone, the new one places
    let dns = frame(
        "udp",
        client(7).0,
        999,
        IpAddr::V4(VIP),
        53,
        TcpFlags::default(),
        b"q",
    );
    assert_eq!(
        run(&mut c, &mut s, dns, 2).0,
        Verdict::Drop(DropCause::LbNoService)
    );
    let web = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 101));
    let f = frame("tcp", client(8).0, 999, web, 443, TcpFlags::SYN, b"");
    let (v, out) = run(&mut c, &mut s, f, 2);
    assert_eq!(
        (v, out.info.tuple.dst),
        (Verdict::Forward, "10.3.0.1".parse().unwrap())
    );
    // listed again: it takes new connections again
    reload(
        &mut c,
        "\"10.1.0.1:8080\", \"10.1.0.2:8080\", \"10.1.0.3:8080\", \"10.1.0.4:8080\", \"10.1.0.5:8080\"",
        "",
    )
    .unwrap();
    let back = (2000..2600)
        .filter(|&i| open(&mut c, &mut s, i).1 == gone)
        .count();
    assert!(
        back > 50,
        "{back} new connections on the backend listed again"
    );
    // what cannot change live
    for (lb, why) in [
        ("snat = [\"192.0.2.11\"]", "`snat`"),
        (
            "snat = [\"192.0.2.10\", \"192.0.2.11\", \"192.0.2.12\"]\nports = \"2000-30000\"",
            "`ports`",
        ),
    ] {
        let t = format!(
            "[steering]\nshards = 16\n[[nf]]\nkind = \"lb\"\n{lb}\n\
             [[nf.service]]\nvip = \"10.0.0.100:80\"\nbackends = [\"10.1.0.1:8080\"]\n"
        );
        let new = ChainConfig::from_toml(&t)
            .unwrap()
            .build(std::path::Path::new("."))
            .unwrap();
        let e = c.reload_nfs(&new, &[0]).unwrap_err();
        assert!(e.contains(why), "{e}");
    }
}

/// The control component moved between the workers and its core again and
/// again while requests come and a worker thread processes traffic: every
/// request is applied once and in the order it was accepted — each backend
/// ends in the state its last request asked for.
#[test]
fn requests_keep_their_order_across_placement_changes() {
    for _ in 0..5 {
        // a small table: a request takes microseconds, so both paths drain
        // between changes and each gets requests
        let cfg = placed("core", "").replace("snat = [", "table_size = 1009\nsnat = [");
        let (c, s) = chain(&cfg);
        let ctl = lb(&c).control();
        let stop = Arc::new(AtomicBool::new(false));
        let worker = traffic(c, s, stop.clone());
        let flipping = Arc::new(AtomicBool::new(true));
        let flipper = {
            let (ctl, flipping) = (ctl.clone(), flipping.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                // Relaxed: the flag only ends the loop
                while flipping.load(Ordering::Relaxed) {
                    let p = if n.is_multiple_of(2) {
                        nf::component::Placement::Inline
                    } else {
                        nf::component::Placement::Core
                    };
                    ctl.set_placement(p).unwrap();
                    n += 1;
                    std::thread::sleep(Duration::from_micros(50));
                }
                n
            })
        };
        let mut last = [true; 4];
        let mut sent = 0u64;
        while sent < 400 {
            let k = sent as usize;
            let (b, up) = ((k / 2) % 4, k % 2 == 1);
            // a backend's down and up requests on either side of a change,
            // to the core and back, then inline and to the core
            let p = if matches!(k % 4, 0 | 3) {
                nf::component::Placement::Core
            } else {
                nf::component::Placement::Inline
            };
            ctl.set_placement(p).unwrap();
            if ctl.request(0, b, up).is_ok() {
                last[b] = up;
                sent += 1;
            }
            if k % 2 == 1 {
                std::thread::sleep(Duration::from_micros(30));
            }
        }
        flipping.store(false, Ordering::Relaxed);
        let flips = flipper.join().unwrap();
        assert!(flips > 10, "{flips} changes");
        let t = std::time::Instant::now();
        while ctl.pending() > 0 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Relaxed);
        let (_, no_backend, c) = worker.join().unwrap();
        assert_eq!(no_backend, 0);
        let n = counters(&c);
        assert_eq!(n["control_requests"], 400);
        assert_eq!(n["control_inline"] + n["control_core"], 400, "{n:?}");
        assert!(
            n["control_inline"] > 0 && n["control_core"] > 0,
            "both paths: {n:?}"
        );
        assert_eq!(
            lb(&c).control().services()[0].health(),
            last.to_vec(),
            "the last request for each backend is its state"
        );
    }
}

/// `placement = "auto"`: the director moves the control component to its
/// core while expensive requests come often (the 65 537-entry table rebuilt
/// every 5 ms of chain time), back inline when they stop, and says why; no
/// packet is dropped through either change.
#[test]
fn the_director_places_the_control_component_by_what_it_costs() {
    let (mut c, mut s) = chain(&placed("auto", ""));
    let ctl = lb(&c).control();
    assert_eq!(ctl.placement(), nf::component::Placement::Inline);
    let mut forwarded = 0;
    for ms in 0..1_000u64 {
        if (200..500).contains(&ms) && ms % 5 == 0 {
            let k = (ms / 5) as usize;
            ctl.request(0, (k / 2) % 4, k % 2 == 1).unwrap();
        }
        let (a, p) = client(ms as u32);
        let f = frame("tcp", a, p, IpAddr::V4(VIP), 80, TcpFlags::SYN, b"");
        let (v, _) = run(&mut c, &mut s, f, ms * 1_000_000);
        forwarded += usize::from(v == Verdict::Forward);
        // the component's thread keeps up in real time, as it would
        if ctl.placement() == nf::component::Placement::Core {
            ctl.wait_idle(Duration::from_secs(5));
        }
    }
    assert_eq!(forwarded, 1_000, "no packet dropped");
    let d = ctl.decisions();
    let to: Vec<_> = d.iter().map(|d| (d.to, d.at_ns / 1_000_000)).collect();
    assert_eq!(to.len(), 2, "{d:?}");
    assert_eq!(to[0].0, nf::component::Placement::Core);
    assert!(
        (220..=260).contains(&to[0].1),
        "to the core after 3 busy periods: {to:?}"
    );
    assert!(d[0].reason.contains("saves the workers"), "{}", d[0].reason);
    assert_eq!(to[1].0, nf::component::Placement::Inline);
    assert!(
        (500..=560).contains(&to[1].1),
        "back after 3 quiet periods: {to:?}"
    );
    let n = counters(&c);
    assert_eq!(n["placement_changes"], 2);
    assert_eq!(n["control_inline"] + n["control_core"], 60);
    assert!(n["control_core"] > 40, "{n:?}");
}

/// A new connection on a closed connection's ports is scheduled again, as
/// IPVS does with `conn_reuse_mode`: while its backend is up the client's next
/// SYN on the same port reopens the connection there (same backend, same
/// balancer port); once that backend is down the SYN goes to a live one, the
/// old connection released (its replies find nothing) and the new one's
/// replies rewritten back to the client.
#[test]
fn a_new_connection_on_a_closed_ones_ports_is_scheduled_again() {
    let (mut c, mut s) = chain(CFG);
    let send = |c: &mut Chain, s: &mut [Shard], i: u32, flags: TcpFlags| {
        let (a, p) = client(i);
        let f = frame("tcp", a, p, IpAddr::V4(VIP), 80, flags, b"");
        let (v, out) = run(c, s, f, 0);
        assert_eq!(v, Verdict::Forward, "connection {i}, {flags:?}");
        let t = out.info.tuple;
        (t.dst, t.src, t.src_port)
    };
    let reply = |c: &mut Chain, s: &mut [Shard], (b, snat, port): (IpAddr, IpAddr, u16)| {
        let f = frame(
            "tcp",
            b,
            8080,
            snat,
            port,
            TcpFlags::SYN | TcpFlags::ACK,
            b"",
        );
        let (v, out) = run(c, s, f, 0);
        (v, out.info.tuple)
    };
    let first: Vec<_> = (0..40)
        .map(|i| send(&mut c, &mut s, i, TcpFlags::SYN))
        .collect();
    for i in 0..40 {
        send(&mut c, &mut s, i, TcpFlags::FIN | TcpFlags::ACK);
    }
    // the backend is up: reopened where it was, on the same balancer port
    for (i, was) in first.iter().enumerate() {
        assert_eq!(send(&mut c, &mut s, i as u32, TcpFlags::SYN), *was);
        send(&mut c, &mut s, i as u32, TcpFlags::FIN | TcpFlags::ACK);
    }
    let k = counters(&c);
    assert_eq!((k["placed"], k["rescheduled"], k["released"]), (40, 0, 0));
    // connection 0's backend goes down
    let ctl = lb(&c).control();
    let gone = first[0].0;
    let (svc, down) = ctl.find("10.0.0.100:80", &format!("{gone}:8080")).unwrap();
    ctl.set_healthy(svc, down, false).unwrap();
    let on_gone = first.iter().filter(|f| f.0 == gone).count() as u64;
    for (i, was) in first.iter().enumerate() {
        let now = send(&mut c, &mut s, i as u32, TcpFlags::SYN);
        if was.0 == gone {
            assert_ne!(now.0, gone, "connection {i} back on the down backend");
            // the old connection is gone; the new one answers
            assert_eq!(
                reply(&mut c, &mut s, *was).0,
                Verdict::Drop(DropCause::LbNoConnection)
            );
            let (v, back) = reply(&mut c, &mut s, now);
            assert_eq!(v, Verdict::Forward);
            assert_eq!((back.dst, back.dst_port), client(i as u32));
        } else {
            assert_eq!(now, *was, "connection {i} moved off a live backend");
        }
    }
    let k = counters(&c);
    assert!(on_gone > 0);
    assert_eq!(
        (k["placed"], k["rescheduled"], k["released"]),
        (40 + on_gone, on_gone, on_gone)
    );
}
