//! Chains as a whole: the NFLOW-key check, the SYN-flood guarantee, delayed merging
//! of mergeable state, the sequence check, config errors, and a translated
//! generated trace through tshark.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use common::{chain, frame, run, FW_NAT_SEQ};
use nf::monitor::Monitor;
use nf::{ChainConfig, ConfigError, DropCause, Verdict};
use trace::{Generator, TraceSpec};
use wire::TcpFlags;

fn v4(x: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(x))
}

#[test]
fn nat_plus_exact_monitor_is_refused_unless_mergeable() {
    let base = r#"
        [[nf]]
        kind = "nat"
        internal = "10.0.0.0/8"
        external = ["203.0.113.1"]
        [[nf]]
        kind = "monitor"
    "#;
    let err = ChainConfig::from_toml(&format!("{base}state = \"exact\"\n"))
        .unwrap()
        .build(Path::new("."))
        .err()
        .expect("refused");
    let msg = err.to_string();
    assert!(matches!(err, ConfigError::Chain(_)), "{msg}");
    for word in [
        "monitor",
        "source IP",
        "nat",
        "symmetric ip-ports",
        "mergeable",
    ] {
        assert!(msg.contains(word), "`{word}` missing from: {msg}");
    }
    let ok = ChainConfig::from_toml(&format!("{base}state = \"mergeable\"\n"))
        .unwrap()
        .build(Path::new("."))
        .unwrap();
    assert!(
        ok.describe().contains("mergeable per-core state"),
        "{}",
        ok.describe()
    );
    assert_eq!(ok.steering().to_string(), "symmetric ip-ports");
    // an exact monitor alone steers on the source address
    let alone = ChainConfig::from_toml("[[nf]]\nkind = \"monitor\"\nstate = \"exact\"\n")
        .unwrap()
        .build(Path::new("."))
        .unwrap();
    assert_eq!(alone.steering().to_string(), "src-ip");
}

fn handshake(c: &mut nf::Chain, s: &mut [nf::Shard], i: u32, now: u64) {
    let (cl, sv) = (v4(0x0a00_0000 | i), v4(0xc612_0001));
    let sp = 10_000 + i as u16;
    assert_eq!(
        run(c, s, frame("tcp", cl, sp, sv, 443, TcpFlags::SYN, b""), now).0,
        Verdict::Forward
    );
    assert_eq!(
        run(
            c,
            s,
            frame("tcp", sv, 443, cl, sp, TcpFlags::SYN | TcpFlags::ACK, b""),
            now
        )
        .0,
        Verdict::Forward
    );
    assert_eq!(
        run(c, s, frame("tcp", cl, sp, sv, 443, TcpFlags::ACK, b""), now).0,
        Verdict::Forward
    );
}

#[test]
fn syn_flood_never_pushes_out_established_connections() {
    for policy in ["refuse", "evict-unassured"] {
        let toml = format!(
            "[steering]\nshards = 1\n[table]\ncapacity = 64\npolicy = \"{policy}\"\n\
             [[nf]]\nkind = \"firewall\"\nrules = \"allow tcp any -> any\"\n"
        );
        let (mut c, mut s) = chain(&toml);
        for i in 0..50 {
            handshake(&mut c, &mut s, i, 1);
        }
        // 20 000 spoofed SYNs, 100 ms apart: the table (64) fills up, and the
        // 14 unassured entries are 1.4 s old when a SYN finds them (old enough
        // to be evicted; see the next test for a faster flood)
        let at = |i: u32| 2 + u64::from(i) * 100_000_000;
        let mut flood_dropped = 0;
        for i in 0..20_000u32 {
            let f = frame(
                "tcp",
                v4(0x6400_0000 | i),
                1234,
                v4(0xc612_0001),
                443,
                TcpFlags::SYN,
                b"",
            );
            if run(&mut c, &mut s, f, at(i)).0 == Verdict::Drop(DropCause::TableFull) {
                flood_dropped += 1;
            }
        }
        // every established connection still passes, both ways
        for i in 0..50u32 {
            let (cl, sv) = (v4(0x0a00_0000 | i), v4(0xc612_0001));
            let sp = 10_000 + i as u16;
            assert_eq!(
                run(
                    &mut c,
                    &mut s,
                    frame(
                        "tcp",
                        cl,
                        sp,
                        sv,
                        443,
                        TcpFlags::ACK | TcpFlags::PSH,
                        b"data"
                    ),
                    at(20_000)
                )
                .0,
                Verdict::Forward,
                "{policy}: conn {i}"
            );
            assert_eq!(
                run(
                    &mut c,
                    &mut s,
                    frame("tcp", sv, 443, cl, sp, TcpFlags::ACK, b""),
                    at(20_000)
                )
                .0,
                Verdict::Forward,
                "{policy}: reply {i}"
            );
        }
        let st = s[0].table.stats().clone();
        match policy {
            "refuse" => {
                assert_eq!(flood_dropped, 20_000 - 14, "{st:?}");
                assert_eq!(st.evicted, 0);
            }
            _ => {
                assert_eq!(flood_dropped, 0, "SYN entries evict each other");
                assert_eq!(st.evicted, 20_000 - 14);
            }
        }
        assert_eq!(c.counters().dropped(DropCause::TableFull), flood_dropped);
    }
}

fn monitor_of(c: &nf::Chain) -> &Monitor {
    c.nfs()[0].as_any().downcast_ref::<Monitor>().unwrap()
}

/// Only a threshold reads the merged view: a mergeable monitor without one
/// puts nothing on the board (its counters merge once, for the report), one
/// with a threshold shares its counters, first all it counted so far.
#[test]
fn a_mergeable_monitor_shares_its_counters_only_for_a_threshold() {
    let spec = TraceSpec {
        flows: 50,
        packets: 500,
        ..Default::default()
    };
    let pkts: Vec<_> = Generator::new(&spec).unwrap().collect();
    for (threshold, shares) in [(0, false), (1_000, true)] {
        let toml = format!("[[nf]]\nkind = \"monitor\"\nthreshold_packets = {threshold}\n");
        let (mut c, mut shards) = chain(&toml);
        assert_eq!(c.shares_state(), shares, "threshold {threshold}");
        for p in &pkts {
            run(&mut c, &mut shards, p.frame.clone(), p.ts_ns);
        }
        let shared = c.share();
        assert_eq!(shared.is_empty(), !shares, "threshold {threshold}");
        if let Some(Some(s)) = shared.first() {
            let s = s
                .downcast_ref::<nf::monitor::merged::Share>()
                .expect("a monitor's share");
            assert!(s.is_full(), "the first share holds every source");
            let counted: u64 = s.totals().iter().map(|t| t.1).sum();
            assert_eq!(counted, pkts.len() as u64);
        }
    }
}

#[test]
fn merged_per_core_monitors_equal_one_core() {
    let toml = "[steering]\nshards = 4\n[[nf]]\nkind = \"monitor\"\n[[nf]]\nkind = \"seqcheck\"\n";
    let spec = TraceSpec {
        flows: 300,
        packets: 20_000,
        active_flows: 50,
        ..Default::default()
    };
    let pkts: Vec<_> = Generator::new(&spec).unwrap().collect();
    let (mut one, mut one_shards) = chain(toml);
    let mut cores = [one.instance(), one.instance()];
    let mut core_shards = [one.new_shards(), one.new_shards()];
    for p in &pkts {
        let (_, _) = run(&mut one, &mut one_shards, p.frame.clone(), p.ts_ns);
        // two cores: shards 0,1 on core 0 and 2,3 on core 1
        let h = one.hasher().hash(&wire::parse(&p.frame).unwrap().tuple);
        let core = one.shard_of(h) / 2;
        run(
            &mut cores[core],
            &mut core_shards[core],
            p.frame.clone(),
            p.ts_ns,
        );
    }
    let [mut a, b] = cores;
    assert!(
        a.counters().packets > 0 && b.counters().packets > 0,
        "both cores worked"
    );
    a.merge_from(&b);
    let (m1, m2) = (monitor_of(&one).report(), monitor_of(&a).report());
    assert_eq!(m1.sources, m2.sources, "per-source counters");
    assert_eq!(
        m1.destinations.count(),
        m2.destinations.count(),
        "distinct destinations"
    );
    for src in m1.sources.keys() {
        assert_eq!(
            m1.heavy.estimate(src),
            m2.heavy.estimate(src),
            "count-min of {src}"
        );
    }
    assert_eq!(a.counters(), one.counters());
    let total: u64 = m1.sources.values().map(|c| c.packets).sum();
    assert_eq!(total, 20_000);
}

#[test]
fn monitor_threshold_uses_the_other_cores_counts_after_a_merge() {
    let toml = "[[nf]]\nkind = \"monitor\"\nthreshold_packets = 100\naction = \"drop\"\n";
    let (proto, _) = chain(toml);
    let (mut a, mut b) = (proto.instance(), proto.instance());
    let (mut sa, mut sb) = (proto.new_shards(), proto.new_shards());
    let src = v4(0x0a00_0001);
    let f = |port: u16| {
        frame(
            "udp",
            src,
            port,
            v4(0xc612_0001),
            53,
            TcpFlags::default(),
            b"",
        )
    };
    for i in 0..80 {
        assert_eq!(run(&mut a, &mut sa, f(i), 0).0, Verdict::Forward);
        assert_eq!(run(&mut b, &mut sb, f(i), 0).0, Verdict::Forward);
    }
    // 160 in total, but each core alone has seen 80: no drop before the merge
    let board = [a.share(), b.share()];
    a.merge_shared(&board);
    assert_eq!(monitor_of(&a).report().sources[&src].packets, 80);
    // after the merge the threshold sees 160 + 1 on core a; core b has not merged
    assert_eq!(
        run(&mut a, &mut sa, f(1), 0).0,
        Verdict::Drop(DropCause::MonitorThreshold)
    );
    assert_eq!(run(&mut b, &mut sb, f(1), 0).0, Verdict::Forward);
    // b's next share holds only what changed (one source); a merges it on top
    for i in 0..20 {
        run(&mut b, &mut sb, f(i), 0);
    }
    let board = [a.share(), b.share()];
    b.merge_shared(&board);
    assert_eq!(
        run(&mut b, &mut sb, f(1), 0).0,
        Verdict::Drop(DropCause::MonitorThreshold)
    );
}

#[test]
fn seqcheck_counts_reordered_packets() {
    let (mut c, mut s) = chain("[[nf]]\nkind = \"seqcheck\"\n");
    let spec = TraceSpec {
        flows: 20,
        packets: 2_000,
        ..Default::default()
    };
    let mut pkts: Vec<_> = Generator::new(&spec).unwrap().collect();
    // swap three pairs of packets of the same connection
    let key = |p: &trace::GenPacket| wire::parse(&p.frame).unwrap().tuple.canonical().0;
    let mut swaps = 0;
    let mut i = 0;
    while swaps < 3 && i < pkts.len() {
        if let Some(j) = (i + 1..pkts.len()).find(|&j| key(&pkts[j]) == key(&pkts[i])) {
            pkts.swap(i, j);
            swaps += 1;
            i = j + 1;
        } else {
            i += 1;
        }
    }
    assert_eq!(swaps, 3);
    for p in &pkts {
        run(&mut c, &mut s, p.frame.clone(), 0);
    }
    let counters = c.nfs()[0].counters();
    let get = |n: &str| counters.iter().find(|(k, _)| *k == n).unwrap().1;
    assert_eq!(get("checked"), 2_000);
    assert!(
        get("reordered") >= 3,
        "each swap is at least one reordering: {counters:?}"
    );
    // in order: none
    let (mut c, mut s) = chain("[[nf]]\nkind = \"seqcheck\"\n");
    for p in Generator::new(&spec).unwrap() {
        run(&mut c, &mut s, p.frame, 0);
    }
    assert_eq!(c.nfs()[0].counters()[1], ("reordered", 0));
}

#[test]
fn config_errors_name_the_field() {
    let cases = [
        ("[steering]\nbuckets = 100\n[[nf]]\nkind = \"seqcheck\"\n", "steering.buckets"),
        ("[steering]\nshards = 3\n[[nf]]\nkind = \"seqcheck\"\n", "steering.shards"),
        ("[table]\npolicy = \"lru\"\n[[nf]]\nkind = \"seqcheck\"\n", "table.policy"),
        ("[[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"2001:db8::1\"]\n", "nf[0].external"),
        ("[[nf]]\nkind = \"nat\"\ninternal = \"banana\"\nexternal = [\"1.2.3.4\"]\n", "nf[0].internal"),
        ("[[nf]]\nkind = \"seqcheck\"\n[[nf]]\nkind = \"firewall\"\nrules = \"allow tcp any -> any\\nallow tpc any -> any\"\n", "line 2"),
        ("[steering]\nkey = \"00\"\n[[nf]]\nkind = \"seqcheck\"\n", "steering.key"),
        ("", "no NF"),
        ("[[nf]]\nkind = \"router\"\n", "nf[0].routes"),
    ];
    for (toml, want) in cases {
        let e = ChainConfig::from_toml(toml)
            .and_then(|c| c.build(Path::new(".")))
            .err()
            .expect(want);
        assert!(e.to_string().contains(want), "`{want}` not in: {e}");
    }
    // unknown fields and bad durations are rejected by the parser, naming them
    for (toml, want) in [
        ("[[nf]]\nkind = \"seqcheck\"\nidel = \"1s\"\n", "idel"),
        ("[[nf]]\nkind = \"seqcheck\"\nidle = \"soon\"\n", "soon"),
        ("[tabel]\n", "tabel"),
        // wrong types name the field's path, inside an NF's table too
        ("[table]\ncapacity = \"big\"\n", "`table.capacity`"),
        (
            "[[nf]]\nkind = \"seqcheck\"\n[[nf]]\nkind = \"ids\"\nrules = \"\"\nring = \"big\"\n",
            "`nf[1].ring`",
        ),
        (
            "[[nf]]\nkind = \"firewall\"\nrules = \"\"\ndefault = \"maybe\"\n",
            "`nf[0].default`",
        ),
        (
            "[[nf]]\nkind = \"firewall\"\nrules = \"\"\ndefault = \"maybe\"\n",
            "unknown variant `maybe`, expected `allow` or `deny`",
        ),
        (
            "[[nf]]\nkind = \"nta\"\n",
            "unknown NF kind `nta`: expected one of firewall, nat, monitor",
        ),
        ("[[nf]]\nrules = \"\"\n", "needs `kind"),
    ] {
        let e = ChainConfig::from_toml(toml).expect_err(want);
        assert!(e.to_string().contains(want), "`{want}` not in: {e}");
    }
}

#[test]
fn translated_trace_passes_tshark() {
    let mut c = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let mut shards = c.new_shards();
    let spec = TraceSpec {
        flows: 200,
        packets: 10_000,
        ipv6_share: 0.0,
        ..Default::default()
    };
    let mut out = Vec::new();
    for p in Generator::new(&spec).unwrap() {
        let (v, pkt) = run(&mut c, &mut shards, p.frame, p.ts_ns);
        assert_eq!(
            v,
            Verdict::Forward,
            "the default chain forwards the generated trace"
        );
        out.push((p.ts_ns, pkt.data));
    }
    let translated = out
        .iter()
        .filter(|(_, f)| {
            wire::parse(f)
                .unwrap()
                .tuple
                .src
                .to_string()
                .starts_with("203.0.113.")
        })
        .count();
    assert!(
        translated > 4_000,
        "outbound packets translated: {translated}"
    );
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("nat-out.pcap");
    trace::write_pcap(&path, out.iter().map(|(t, f)| (*t, &f[..]))).unwrap();
    let r = trace::tshark::validate(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.packets, 10_000);
    assert_eq!(r.bad_checksums, 0, "{:?}", r.samples);
    assert_eq!(r.good_checksums, 10_000);
    assert_eq!(r.errors, 0, "{:?}", r.samples);
    let seq = c.nfs()[2].counters();
    assert_eq!(seq[1], ("reordered", 0));
}

#[test]
fn bursts_equal_one_packet_at_a_time() {
    // a firewall that denies a quarter of the flows, so entries are created and
    // freed inside bursts, plus NAT and seqcheck
    let toml = format!("[steering]\nshards = 8\n{FW_NAT_SEQ}");
    let spec = TraceSpec {
        flows: 2_000,
        packets: 30_000,
        active_flows: 300,
        ..Default::default()
    };
    let pkts: Vec<_> = Generator::new(&spec).unwrap().collect();
    let (mut one, mut s1) = chain(&toml);
    let (mut burst, s2) = chain(&toml);
    let mut s2: Vec<Option<nf::Shard>> = s2.into_iter().map(Some).collect();
    let mut singles = Vec::new();
    for p in &pkts {
        let (v, pk) = run(&mut one, &mut s1, p.frame.clone(), p.ts_ns);
        singles.push((v, pk.data));
    }
    let mut parsed: Vec<nf::Packet> = pkts
        .iter()
        .map(|p| burst.packet(p.frame.clone(), p.ts_ns).unwrap())
        .collect();
    let mut out = Vec::new();
    let mut bursts = Vec::new();
    for chunk in parsed.chunks_mut(32) {
        let now = chunk[0].ts_ns;
        burst.process_burst(&mut s2, chunk, now, &mut out);
        bursts.extend(
            out.iter()
                .copied()
                .zip(chunk.iter().map(|p| p.data.clone())),
        );
    }
    assert_eq!(singles.len(), bursts.len());
    for (i, (a, b)) in singles.iter().zip(&bursts).enumerate() {
        assert_eq!(a, b, "packet {i}");
    }
    assert_eq!(one.counters(), burst.counters());
    for (a, b) in one.nfs().iter().zip(burst.nfs()) {
        assert_eq!(a.counters(), b.counters(), "{}", a.name());
    }
    assert!(
        one.counters().dropped(DropCause::Policy) > 1_000,
        "{:?}",
        one.counters()
    );
    assert!(one.counters().forwarded > 15_000);
}

/// Flow offload at the chain level: the default FW → NAT → seqcheck chain run
/// with half of the flows' entries detached and processed by a second core's chain
/// (`process_leased`) gives the same bytes out, verdicts and table as running
/// everything at home. A NAT flow is leased only once its mapping exists.
#[test]
fn leased_processing_equals_home_processing() {
    use std::collections::HashMap;
    let spec = TraceSpec {
        flows: 400,
        packets: 20_000,
        active_flows: 80,
        ..Default::default()
    };
    let pkts: Vec<_> = Generator::new(&spec).unwrap().collect();
    let build = || {
        ChainConfig::default_chain()
            .build(Path::new("."))
            .expect("default chain")
    };
    let (mut home, mut away) = (build(), build());
    let mut other = away.instance();
    let mut home_shards: Vec<Option<nf::Shard>> = home.new_shards().into_iter().map(Some).collect();
    let mut shards: Vec<Option<nf::Shard>> = away.new_shards().into_iter().map(Some).collect();
    let mut leased: HashMap<(usize, u32), nf::Leased> = HashMap::new();
    let (mut n_leased, mut n_refused) = (0, 0);
    let mut verdicts = Vec::new();
    let mut routed = Vec::new();
    for burst in pkts.chunks(16) {
        let now = burst[0].ts_ns;
        let mk = |c: &nf::Chain| -> Vec<nf::Packet> {
            burst
                .iter()
                .map(|p| c.packet(p.frame.clone(), p.ts_ns).unwrap())
                .collect()
        };
        let mut a = mk(&home);
        home.process_burst(&mut home_shards, &mut a, now, &mut verdicts);
        let mut b = mk(&away);
        let mut route_away = vec![false; b.len()];
        let routing = nf::Routing::ReadsState;
        away.process_burst_routed(
            &mut shards,
            &mut b,
            now,
            &mut routed,
            routing,
            |i, p, hit| {
                let s = hit.shard.info.index;
                let key = (s, hit.entry.0);
                let go = leased.contains_key(&key)
                    || (hit.shard.table.key(hit.entry).mix() % 2 == 0 && {
                        let ok = hit.offloadable();
                        if !ok {
                            n_refused += 1;
                        }
                        ok
                    });
                if go && !leased.contains_key(&key) {
                    leased.insert(key, hit.shard.table.detach(hit.entry));
                    n_leased += 1;
                }
                let _ = p;
                route_away[i] = go;
                !go
            },
        );
        for (i, p) in b.iter_mut().enumerate() {
            let v = if route_away[i] {
                assert!(routed[i].is_none());
                let s = away.shard_of(p.hash);
                let e = p.entry.expect("routed packets carry their entry");
                let l = leased.get_mut(&(s, e.0)).unwrap();
                other.process_leased(away.shard_info(s), e, l, p, now)
            } else {
                routed[i].expect("ran here")
            };
            assert_eq!(v, verdicts[i], "packet {i} of a burst at {now}");
            assert_eq!(p.data, a[i].data, "bytes of packet {i}");
        }
    }
    assert!(n_leased > 50, "{n_leased} flows leased");
    eprintln!("{n_leased} flows leased, {n_refused} refused (no NAT mapping)");
    // re-attach everything: the tables agree entry for entry
    for ((s, e), l) in leased.drain() {
        shards[s].as_mut().unwrap().table.attach(state_entry(e), l);
    }
    away.merge_from(&other);
    assert_eq!(away.counters(), home.counters());
    for (x, y) in shards.iter().zip(&home_shards) {
        let (x, y) = (x.as_ref().unwrap(), y.as_ref().unwrap());
        assert_eq!(x.table.len(), y.table.len());
        for e in y.table.entries() {
            for nf in 0..3 {
                assert_eq!(x.table.slot(e, nf), y.table.slot(e, nf));
            }
        }
    }
}

fn state_entry(e: u32) -> state::EntryId {
    state::EntryId(e)
}

/// `[table] fast_entries`: the fast table is gone; a file that asks for one
/// is told why.
#[test]
fn a_fast_table_is_refused_with_its_reason() {
    let bad = ChainConfig::from_toml("[table]\nfast_entries = 64\n[[nf]]\nkind = \"seqcheck\"")
        .and_then(|c| c.build(Path::new(".")).map(|_| ()));
    let e = bad.unwrap_err().to_string();
    assert!(
        e.contains("table.fast_entries") && e.contains("removed"),
        "{e}"
    );
    let none = ChainConfig::from_toml("[table]\nfast_entries = 0\n[[nf]]\nkind = \"seqcheck\"")
        .and_then(|c| c.build(Path::new(".")).map(|_| ()));
    assert!(none.is_ok(), "0 (none) is still a valid line");
}

#[test]
fn a_new_flow_dropped_later_in_the_chain_leaves_no_state_in_earlier_nfs() {
    // the firewall opens connections from the inside; the NAT has 64 ports,
    // one per bucket group, so connections run it out
    let (mut c, mut shards) = chain(&common::fw_nat(
        "[steering]\nbuckets = 64\nshards = 1",
        "203.0.113.1",
        "ports = \"20000-20063\"",
    ));
    let server = v4(0xc612_0001);
    let syn = |src| frame("tcp", src, 4000, server, 80, TcpFlags::SYN, b"");
    let (mut forwarded, mut refused) = (0u64, Vec::new());
    for i in 0..200u32 {
        let src = v4(0x0a00_0000 | i);
        match run(&mut c, &mut shards, syn(src), u64::from(i)).0 {
            Verdict::Forward => forwarded += 1,
            Verdict::Drop(DropCause::NatPortsExhausted) => refused.push(src),
            v => panic!("{v:?}"),
        }
    }
    assert!(
        forwarded <= 64 && !refused.is_empty(),
        "{forwarded} forwarded"
    );
    // every refused connection's firewall state was released
    assert_eq!(c.counters().undone, refused.len() as u64);
    assert_eq!(shards[0].table.len() as u64, forwarded);
    // a refused connection's SYN-ACK, sent to its untranslated address, finds
    // no connection the firewall opened: dropped, not passed untranslated
    for (i, dst) in refused.iter().enumerate() {
        let synack = frame(
            "tcp",
            server,
            80,
            *dst,
            4000,
            TcpFlags::SYN | TcpFlags::ACK,
            b"",
        );
        let (v, _) = run(&mut c, &mut shards, synack, 1000 + i as u64);
        assert!(matches!(v, Verdict::Drop(_)), "reply to {dst}: {v:?}");
    }
    assert_eq!(shards[0].table.len() as u64, forwarded);
}

#[test]
fn emergency_mode_gives_unassured_flows_short_timeouts_until_the_table_drains() {
    // 100 flows per shard, one shard; emergency from 90 to 50 flows; SYN
    // timeout 120 s normally, 5 s in emergency
    let (mut c, mut shards) = chain(
        r#"
        [steering]
        buckets = 64
        shards = 1
        [table]
        capacity = 100
        emergency_high = 0.9
        emergency_low = 0.5
        [[nf]]
        kind = "firewall"
        rules = "allow tcp any -> any"
        "#,
    );
    let s = |i: u32| v4(0x0a00_0000 | i);
    let server = v4(0xc612_0001);
    let sec = 1_000_000_000u64;
    // an established connection first: assured, its timeout stays long
    let ok = |v: Verdict| assert_eq!(v, Verdict::Forward);
    ok(run(
        &mut c,
        &mut shards,
        frame("tcp", s(1000), 5, server, 80, TcpFlags::SYN, b""),
        0,
    )
    .0);
    let sa = TcpFlags::SYN | TcpFlags::ACK;
    ok(run(
        &mut c,
        &mut shards,
        frame("tcp", server, 80, s(1000), 5, sa, b""),
        0,
    )
    .0);
    ok(run(
        &mut c,
        &mut shards,
        frame("tcp", s(1000), 5, server, 80, TcpFlags::ACK, b""),
        0,
    )
    .0);
    // then a flood of SYNs: 88 below the high-water mark, 11 from it on (the
    // SYN that brings the table to 90 flows already runs in emergency mode)
    for i in 0..99 {
        let f = frame("tcp", s(i), 4000, server, 80, TcpFlags::SYN, b"");
        ok(run(&mut c, &mut shards, f, 0).0);
    }
    assert!(shards[0].emergency);
    assert_eq!(c.counters().emergencies, 1);
    assert_eq!(shards[0].table.len(), 100);
    // 6 s later: the SYNs that came in emergency mode are gone, the others and
    // the established connection stay
    c.expire(&mut shards[0], 6 * sec);
    assert_eq!(shards[0].table.len(), 100 - 11);
    assert!(shards[0].emergency, "not yet down to the low-water mark");
    // while in emergency, every unassured flow touched gets the short timeout:
    // the 88 older SYNs are retransmitted, and then go 5 s later
    for i in 0..88 {
        let f = frame("tcp", s(i), 4000, server, 80, TcpFlags::SYN, b"");
        ok(run(&mut c, &mut shards, f, 6 * sec).0);
    }
    c.expire(&mut shards[0], 12 * sec);
    assert_eq!(shards[0].table.len(), 1, "only the established connection");
    // the next packet sees the table below the low-water mark
    ok(run(
        &mut c,
        &mut shards,
        frame("tcp", s(1000), 5, server, 80, TcpFlags::ACK, b""),
        12 * sec,
    )
    .0);
    assert!(!shards[0].emergency);
    assert_eq!(c.counters().emergencies, 1);
}

#[test]
fn emergency_marks_are_checked() {
    for (t, field) in [
        ("emergency_high = 1.5", "table.emergency_high"),
        (
            "emergency_high = 0.5\nemergency_low = 0.7",
            "table.emergency_low",
        ),
    ] {
        let toml = format!(
            "[table]\n{t}\n[[nf]]\nkind = \"firewall\"\nrules = \"allow any any -> any\"\n"
        );
        let err = ChainConfig::from_toml(&toml)
            .unwrap()
            .build(Path::new("."))
            .err()
            .expect("refused");
        assert!(err.to_string().contains(field), "{err}");
    }
}

#[test]
fn evict_unassured_spares_a_handshake_in_flight() {
    // 64 flows per shard; unassured flows are evicted only from 1 s of age
    let (mut c, mut s) = chain(
        "[steering]\nshards = 1\n[table]\ncapacity = 64\npolicy = \"evict-unassured\"\n\
         evict_min_age = \"1s\"\nemergency_high = 0\n\
         [[nf]]\nkind = \"firewall\"\nrules = \"allow tcp any -> any\"\n",
    );
    let ms = 1_000_000u64;
    let server = v4(0xc612_0001);
    let spoofed = |i: u32| {
        frame(
            "tcp",
            v4(0x6400_0000 | i),
            1234,
            server,
            443,
            TcpFlags::SYN,
            b"",
        )
    };
    // an old flood fills the table
    for i in 0..64 {
        assert_eq!(run(&mut c, &mut s, spoofed(i), 0).0, Verdict::Forward);
    }
    // 2 s later a real client's SYN evicts the oldest spoofed entry
    let client = v4(0x0a00_0001);
    let syn = frame("tcp", client, 5000, server, 443, TcpFlags::SYN, b"");
    assert_eq!(run(&mut c, &mut s, syn, 2000 * ms).0, Verdict::Forward);
    // the flood goes on, one SYN a millisecond: the 63 old entries go, then
    // the oldest candidate is the client's, younger than 1 s: refused, not it
    let mut refused = 0;
    for i in 0..200u32 {
        let v = run(
            &mut c,
            &mut s,
            spoofed(1000 + i),
            (2001 + u64::from(i)) * ms,
        )
        .0;
        refused += u32::from(v == Verdict::Drop(DropCause::TableFull));
    }
    assert_eq!(
        refused,
        200 - 63,
        "once only young flows are left, new ones are refused"
    );
    // the server's SYN-ACK arrives 250 ms after the SYN: the connection is there
    let synack = frame(
        "tcp",
        server,
        443,
        client,
        5000,
        TcpFlags::SYN | TcpFlags::ACK,
        b"",
    );
    assert_eq!(run(&mut c, &mut s, synack, 2250 * ms).0, Verdict::Forward);
    assert_eq!(s[0].table.stats().evicted, 1 + 63);
}

#[test]
fn an_icmpv6_packet_too_big_about_a_tracked_connection_passes_the_firewall() {
    let (mut c, mut s) =
        chain("[[nf]]\nkind = \"firewall\"\nrules = \"allow tcp fd00::/8 -> any\"\n");
    let client: IpAddr = "fd00::2".parse().unwrap();
    let server: IpAddr = "2001:db8::1".parse().unwrap();
    let syn = frame("tcp", client, 40000, server, 443, TcpFlags::SYN, b"");
    let quote = syn[14..14 + 40 + 20].to_vec();
    assert_eq!(run(&mut c, &mut s, syn, 0).0, Verdict::Forward);
    // a router's "packet too big" (type 2) quoting the SYN, to the client
    let ptb = |quote: &[u8]| {
        let mut icmp = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00]; // MTU 1280
        icmp.extend_from_slice(quote);
        let mut ip = vec![0x60, 0, 0, 0];
        ip.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
        ip.extend_from_slice(&[58, 64]);
        ip.extend_from_slice(
            &"2001:db8:ffff::9"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        ip.extend_from_slice(&"fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
        f.extend_from_slice(&ip);
        f.extend_from_slice(&icmp);
        f
    };
    let p = c.packet(ptb(&quote), 1).unwrap();
    assert!(matches!(p.info.l4, wire::L4Info::IcmpError { msg_type: 2 }));
    assert_eq!((p.info.tuple.src, p.info.tuple.dst), (server, client));
    assert_eq!(
        run(&mut c, &mut s, ptb(&quote), 1).0,
        Verdict::Forward,
        "RELATED"
    );
    // about a connection never opened: invalid
    let mut other = quote.clone();
    other[40..42].copy_from_slice(&40001u16.to_be_bytes());
    assert_eq!(
        run(&mut c, &mut s, ptb(&other), 2).0,
        Verdict::Drop(DropCause::CtInvalid)
    );
}

/// `[table] memcap` lowers the capacity until the tables at capacity fit, keeps
/// it when they already do, and names itself when even a small table would not.
#[test]
fn table_memcap_bounds_the_tables() {
    let cfg = |table: &str| {
        format!(
            "[steering]\nshards = 16\n[table]\n{table}\n[[nf]]\nkind = \"firewall\"\n\
             rules = \"allow any 10.0.0.0/8 -> any\"\n[[nf]]\nkind = \"nat\"\n\
             internal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n"
        )
    };
    let build = |table: &str| {
        ChainConfig::from_toml(&cfg(table))
            .unwrap()
            .build(Path::new("."))
    };
    let full = build("capacity = 65536").unwrap();
    let need = full.table_bytes_at_capacity();
    assert!(need > 64 << 20, "{need}");
    for (memcap, bytes) in [
        ("\"64MiB\"", 64u64 << 20),
        ("10000000", 10_000_000),
        ("\"4M\"", 4 << 20),
    ] {
        let c = build(&format!("capacity = 65536\nmemcap = {memcap}")).unwrap();
        assert!(c.table_bytes_at_capacity() <= bytes, "{memcap}");
        assert!(c.table_capacity() < 65536, "{memcap}");
        // the largest that fits: one more flow per shard would not
        let one_more = build(&format!("capacity = {}", c.table_capacity() + 1)).unwrap();
        assert!(one_more.table_bytes_at_capacity() > bytes || c.table_capacity() == 65536);
    }
    let roomy = build(&format!("capacity = 65536\nmemcap = {}", need + 1)).unwrap();
    assert_eq!(roomy.table_capacity(), 65536);
    for bad in ["\"1KiB\"", "0", "\"lots\"", "\"12 parsecs\""] {
        let Err(e) = build(&format!("memcap = {bad}")) else {
            panic!("{bad} accepted")
        };
        let e = e.to_string();
        assert!(e.contains("table.memcap"), "{bad}: {e}");
    }
}

/// `steering.rules`: a plan file of `flowshift steer plan --json`, checked
/// before the chain is built; every error names the field.
#[test]
fn rule_plans_are_checked_and_named() {
    let dir = std::env::temp_dir().join(format!("flowshift-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = |name: &str, bits: &str, rules: &[(&str, &str, u16)]| {
        let rules: Vec<String> = rules
            .iter()
            .map(|(v, m, c)| format!(r#"{{"value":"{v}","mask":"{m}","core":{c},"weight":1}}"#))
            .collect();
        std::fs::write(
            dir.join(name),
            format!(
                r#"{{"bits":"{bits}","rules":[{}],"default_rule":false}}"#,
                rules.join(",")
            ),
        )
        .unwrap();
    };
    let monitor = |file: &str, shards: usize| {
        format!(
            "[steering]\nrules = \"{file}\"\nshards = {shards}\n[[nf]]\nkind = \"monitor\"\nstate = \"exact\"\n"
        )
    };
    plan(
        "two.json",
        "src-ip:31-31",
        &[("0x0", "0x1", 0), ("0x1", "0x1", 1)],
    );
    plan(
        "overlap.json",
        "src-ip:31-31",
        &[("0x0", "0x0", 0), ("0x1", "0x1", 1)],
    );
    plan("wide.json", "src-ip:31-31", &[("0x0", "0x3", 0)]);
    plan("badbits.json", "src-mac", &[("0x0", "0x1", 0)]);
    plan(
        "many.json",
        "src-ip:28-31",
        &(0..16).map(|_| ("0x0", "0xf", 0)).collect::<Vec<_>>(),
    );
    std::fs::write(dir.join("junk.json"), "[1, 2]").unwrap();
    let build = |toml: String| ChainConfig::from_toml(&toml).and_then(|c| c.build(&dir));
    // a good plan: the chain steers by it and starts rule r on its core
    let c = build(monitor("two.json", 16)).unwrap();
    assert_eq!(c.rule_owners(), vec![0, 1]);
    assert!(c.describe().contains("2 ternary rules on src-ip:31-31"));
    for (toml, want) in [
        (monitor("missing.json", 16), "missing.json"),
        (
            monitor("junk.json", 16),
            "not a plan of `flowshift steer plan --json`",
        ),
        (monitor("overlap.json", 16), "rules 0 and 1 overlap"),
        (monitor("wide.json", 16), "wider than the 1-bit key"),
        (monitor("badbits.json", 16), "unknown field `src-mac`"),
        (monitor("many.json", 8), "16 rules need as many shards"),
        (
            "[steering]\nrules = \"two.json\"\n[[nf]]\nkind = \"seqcheck\"\n".to_string(),
            "would reach several shards",
        ),
    ] {
        let e = build(toml).err().expect(want).to_string();
        assert!(e.contains("steering.rules"), "{e}");
        assert!(e.contains(want), "`{want}` not in: {e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `[table] layout = "per-nf"`: the NAT and the sequence check find their
/// entries through indexes of their own, packet by packet — and the chain
/// gives the same bytes, verdicts and counters as the shared layout's one
/// lookup and runs.
#[test]
fn the_per_nf_layout_changes_nothing_but_how_entries_are_found() {
    let shared = format!("[steering]\nshards = 4\n{FW_NAT_SEQ}");
    let per_nf = format!("[table]\nlayout = \"per-nf\"\n{shared}");
    let spec = TraceSpec {
        flows: 2_000,
        packets: 30_000,
        active_flows: 300,
        ..Default::default()
    };
    let pkts: Vec<_> = Generator::new(&spec).unwrap().collect();
    let mut outs = Vec::new();
    let mut chains = Vec::new();
    for toml in [&shared, &per_nf] {
        let (mut c, s) = chain(toml);
        let mut s: Vec<Option<nf::Shard>> = s.into_iter().map(Some).collect();
        let mut parsed: Vec<nf::Packet> = pkts
            .iter()
            .map(|p| c.packet(p.frame.clone(), p.ts_ns).unwrap())
            .collect();
        let (mut out, mut all) = (Vec::new(), Vec::new());
        for chunk in parsed.chunks_mut(32) {
            let now = chunk[0].ts_ns;
            c.process_burst(&mut s, chunk, now, &mut out);
            all.extend(
                out.iter()
                    .copied()
                    .zip(chunk.iter().map(|p| p.data.clone())),
            );
        }
        let own: u64 = s
            .iter()
            .flatten()
            .map(|s| s.table.stats().own_lookups)
            .sum();
        outs.push((all, own));
        chains.push(c);
    }
    let ((a, own_a), (b, own_b)) = (&outs[0], &outs[1]);
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x, y, "packet {i}");
    }
    assert_eq!(chains[0].counters(), chains[1].counters());
    for (x, y) in chains[0].nfs().iter().zip(chains[1].nfs()) {
        assert_eq!(x.counters(), y.counters(), "{}", x.name());
    }
    // the firewall denies some flows: only the others reach the NAT and the
    // sequence check, each looking its packet up (two own lookups a packet)
    let forwarded = chains[1].counters().forwarded;
    assert_eq!(*own_a, 0);
    assert!(
        *own_b >= 2 * forwarded,
        "{own_b} own lookups, {forwarded} forwarded"
    );
    assert!(forwarded > 15_000 && forwarded < 30_000, "{forwarded}");
}

/// `describe` (what `flowshift chain check` prints) names where each NF's
/// component runs as configured.
#[test]
fn describe_names_each_components_placement() {
    let toml = |ids: &str, lb: &str| {
        format!(
            "[[nf]]\nkind = \"ids\"\n{ids}\nrules = 'alert tcp any any -> any any (msg:\"x\"; content:\"abc\"; sid:1;)'\n\
             [[nf]]\nkind = \"lb\"\nsnat = [\"192.0.2.10\"]\n{lb}\n\
             [[nf.service]]\nvip = \"10.0.0.100:80\"\nbackends = [\"10.1.0.1:8080\"]\n"
        )
    };
    for (ids, lb, want) in [
        ("", "", ["; matching inline", "; control inline"]),
        (
            "placement = \"core\"\ncores = 3",
            "placement = \"core\"",
            ["; matching on 3 cores", "; control on a core"],
        ),
        (
            "placement = \"auto\"",
            "placement = \"auto\"",
            [
                "; matching placed by the director: inline or up to a core",
                "; control placed by the director: inline or a core",
            ],
        ),
    ] {
        let d = ChainConfig::from_toml(&toml(ids, lb))
            .unwrap()
            .build(Path::new("."))
            .unwrap()
            .describe();
        let lines: Vec<&str> = d.lines().collect();
        assert!(
            lines[0].starts_with("0: ids") && lines[1].starts_with("1: lb"),
            "{d}"
        );
        for (line, tail) in lines.iter().zip(want) {
            assert!(
                line.ends_with(tail),
                "`{tail}` not at the end of: {line}\n{d}"
            );
        }
    }
}
