//! A burst's packets whose flow entries were found run NF by NF (`Found`):
//! the outcome must be packet-by-packet processing's, byte for byte and
//! counter for counter, when a flow's packets share a run, when the router
//! reads state (so they may not), and when an NF deletes state (so the next
//! packet must find no entry).

mod common;

use std::net::IpAddr;

use common::{chain, FW_NAT_SEQ};
use nf::seqcheck::SeqState;
use nf::{
    Chain, ChainOptions, Ctx, FlowState, Nf, NfMeta, NflowKey, Packet, Routing, Shard, StateKind,
    Verdict,
};
use trace::{Generator, TraceSpec};
use wire::TcpFlags;

/// The shared chain on 4 shards.
fn fw_nat_seq() -> String {
    format!("[steering]\nshards = 4\n{FW_NAT_SEQ}")
}

/// A trace where a few flows carry most packets: a burst holds several
/// packets of one flow, and replies follow their SYN within a burst.
fn heavy_hitters() -> Vec<trace::GenPacket> {
    let spec = TraceSpec {
        flows: 400,
        packets: 20_000,
        active_flows: 40,
        alpha: 1.5,
        ..Default::default()
    };
    Generator::new(&spec).unwrap().collect()
}

/// Verdicts and bytes out, packet by packet.
fn singles(
    c: &mut Chain,
    shards: &mut [Shard],
    pkts: &[trace::GenPacket],
) -> Vec<(Verdict, Vec<u8>)> {
    pkts.iter()
        .map(|p| {
            let mut q = c.packet(p.frame.clone(), p.ts_ns).unwrap();
            let s = c.shard_of(q.hash);
            let v = c.process(&mut shards[s], &mut q, p.ts_ns);
            (v, q.data)
        })
        .collect()
}

/// Verdicts and bytes out, in bursts of `burst` (each burst at its first
/// packet's time, as a packet-by-packet run sees each packet at its own:
/// the trace's timeouts are far longer than a burst).
fn bursts(
    c: &mut Chain,
    shards: &mut [Option<Shard>],
    pkts: &[trace::GenPacket],
    burst: usize,
    routing: Option<Routing>,
) -> Vec<(Verdict, Vec<u8>)> {
    let mut parsed: Vec<Packet> = pkts
        .iter()
        .map(|p| c.packet(p.frame.clone(), p.ts_ns).unwrap())
        .collect();
    let mut got = Vec::new();
    let mut out = Vec::new();
    let mut routed = Vec::new();
    for chunk in parsed.chunks_mut(burst) {
        let now = chunk[0].ts_ns;
        match routing {
            None => c.process_burst(shards, chunk, now, &mut out),
            Some(r) => {
                c.process_burst_routed(shards, chunk, now, &mut routed, r, |_, _, _| true);
                out = routed.iter().map(|v| v.expect("runs here")).collect();
            }
        }
        got.extend(
            out.iter()
                .copied()
                .zip(chunk.iter().map(|p| p.data.clone())),
        );
    }
    got
}

fn assert_same(one: &Chain, other: &Chain, a: &[(Verdict, Vec<u8>)], b: &[(Verdict, Vec<u8>)]) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x, y, "packet {i}");
    }
    assert_eq!(one.counters(), other.counters());
    for (x, y) in one.nfs().iter().zip(other.nfs()) {
        assert_eq!(x.counters(), y.counters(), "{}", x.name());
    }
}

#[test]
fn runs_equal_one_packet_at_a_time_with_heavy_hitters() {
    let pkts = heavy_hitters();
    let (mut one, mut s1) = chain(&fw_nat_seq());
    let expected = singles(&mut one, &mut s1, &pkts);
    for (burst, routing) in [
        (32, None),
        (32, Some(Routing::ReadsState)),
        (7, Some(Routing::Observes)),
        (100, None),
    ] {
        let (mut c, s) = chain(&fw_nat_seq());
        let mut s: Vec<Option<Shard>> = s.into_iter().map(Some).collect();
        let got = bursts(&mut c, &mut s, &pkts, burst, routing);
        assert_same(&one, &c, &expected, &got);
        let lens: Vec<usize> = s.iter().map(|x| x.as_ref().unwrap().table.len()).collect();
        let want: Vec<usize> = s1.iter().map(|x| x.table.len()).collect();
        assert_eq!(
            lens, want,
            "entries per shard, bursts of {burst} {routing:?}"
        );
    }
    // the trace did what it is for: drops, translations and reordering checks
    let c = one.counters();
    assert!(c.forwarded > 10_000 && c.forwarded < c.packets, "{c:?}");
    let nat = one.nfs()[1].counters();
    assert!(
        nat.iter().any(|(k, v)| *k == "inbound" && *v > 1_000),
        "{nat:?}"
    );
}

/// The firewall and NAT run fused wherever they stand in a chain (each
/// packet through both in one loop), and a fused chain's bursts give what
/// its packets give one at a time; in the other order they are not fused.
#[test]
fn fused_firewall_and_nat_equal_one_packet_at_a_time_anywhere_in_the_chain() {
    let pkts = heavy_hitters();
    let fw = "[[nf]]\nkind = \"firewall\"\nrules = \"deny any any -> 198.18.0.0/17\\nallow any 10.0.0.0/8 -> any\\nallow any 203.0.113.0/24 -> any\"\n";
    let nat =
        "[[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n";
    let seq = "[[nf]]\nkind = \"seqcheck\"\n";
    for (nfs, fused) in [
        (format!("{fw}{nat}"), vec![(0, 1)]),
        (format!("{seq}{fw}{nat}"), vec![(1, 2)]),
        (format!("{nat}{fw}"), vec![]),
    ] {
        let cfg = format!("[steering]\nshards = 4\n{nfs}");
        let (mut one, mut s1) = chain(&cfg);
        assert_eq!(one.fused(), fused, "{cfg}");
        let expected = singles(&mut one, &mut s1, &pkts);
        let (mut c, s) = chain(&cfg);
        let mut s: Vec<Option<Shard>> = s.into_iter().map(Some).collect();
        let got = bursts(&mut c, &mut s, &pkts, 32, None);
        assert_same(&one, &c, &expected, &got);
        // (the trace exercises the pair: packets forwarded and dropped)
        let k = one.counters();
        assert!(
            k.forwarded > 5_000 && k.forwarded < k.packets,
            "{cfg}: {k:?}"
        );
        // an instance for another core runs the same plan
        assert_eq!(c.instance().fused(), fused);
    }
}

/// The fused firewall → NAT works on an entry's slots directly, their
/// deadlines with them: a deadline that moves earlier than the tick the
/// entry's timer is armed at (a FIN after the connection was re-armed for
/// its established timeout) must re-arm it as a packet-by-packet run does.
/// With short timeouts over a 20 s trace, idle state expiring after every
/// burst, both chains see each packet at its burst's time; after each burst
/// and at every step of time running on afterwards, what expired is the
/// same: entries per shard and every NF's counters (the NAT's released
/// mappings among them).
/// A firewall → NAT chain on 4 shards with timeouts of seconds: `table`
/// (a `[table]` section or nothing), the established connection's timeout
/// in the firewall and in the NAT, and `extra` lines in both NFs' timeouts.
fn short_timeouts(table: &str, established: (&str, &str), extra: &str) -> String {
    let (fw, nat) = established;
    format!(
        "[steering]\nshards = 4\n{table}\
        [[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n\
        [nf.timeouts]\nsyn_sent = \"1s\"\nsyn_recv = \"1s\"\nestablished = \"{fw}\"\n\
        fin_wait = \"2s\"\ntime_wait = \"1500ms\"\nclose = \"1s\"\n{extra}\
        [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n\
        [nf.timeouts]\ntcp_established = \"{nat}\"\ntcp_transitory = \"1200ms\"\n{extra}"
    )
}

/// Two chains of one configuration whose firewall and NAT run fused: one
/// for packets one at a time, one for bursts, with the trace's packets
/// parsed for the second.
struct Twins {
    one: Chain,
    s1: Vec<Shard>,
    c: Chain,
    s: Vec<Option<Shard>>,
    parsed: Vec<Packet>,
}

fn fused_twins(cfg: &str, pkts: &[trace::GenPacket]) -> Twins {
    let (one, s1) = chain(cfg);
    assert_eq!(one.fused(), vec![(0, 1)]);
    let (c, s) = chain(cfg);
    let parsed = pkts
        .iter()
        .map(|p| c.packet(p.frame.clone(), p.ts_ns).unwrap())
        .collect();
    Twins {
        one,
        s1,
        c,
        s: s.into_iter().map(Some).collect(),
        parsed,
    }
}

#[test]
fn fused_firewall_and_nat_expire_state_as_one_packet_at_a_time() {
    let mut pkts = heavy_hitters();
    for (i, p) in pkts.iter_mut().enumerate() {
        p.ts_ns = i as u64 * 1_000_000;
    }
    let cfg = short_timeouts("", ("5s", "4s"), "");
    let Twins {
        mut one,
        mut s1,
        mut c,
        mut s,
        mut parsed,
    } = fused_twins(&cfg, &pkts);
    let mut out = Vec::new();
    let mut expired = 0;
    for chunk in parsed.chunks_mut(32) {
        let now = chunk[0].ts_ns;
        for p in chunk.iter() {
            let mut q = one.packet(p.data.clone(), p.ts_ns).unwrap();
            let i = one.shard_of(q.hash);
            one.process(&mut s1[i], &mut q, now);
        }
        c.process_burst(&mut s, chunk, now, &mut out);
        for (a, b) in s1.iter_mut().zip(s.iter_mut()) {
            let b = b.as_mut().unwrap();
            let before = a.table.len();
            one.expire(a, now);
            c.expire(b, now);
            expired += before - a.table.len();
            assert_eq!(a.table.len(), b.table.len(), "entries at {now} ns");
        }
        assert_same(&one, &c, &[], &[]);
    }
    let end = pkts.last().unwrap().ts_ns;
    let mut step_ns = 1_000_000u64;
    while step_ns < 86_400_000_000_000 {
        for (a, b) in s1.iter_mut().zip(s.iter_mut()) {
            let b = b.as_mut().unwrap();
            one.expire(a, end + step_ns);
            c.expire(b, end + step_ns);
            assert_eq!(a.table.len(), b.table.len(), "entries at +{step_ns} ns");
        }
        assert_same(&one, &c, &[], &[]);
        step_ns += step_ns / 8;
    }
    // (flows expired while the trace ran, and all of them in the end)
    assert!(expired > 100, "{expired}");
    assert!(s1.iter().all(|x| x.table.is_empty()));
}

#[test]
fn fused_firewall_and_nat_enter_and_leave_emergency_mode_as_one_packet_at_a_time() {
    // small tables whose flows cross the high-water mark and drain below the
    // low one again and again as flows expire (the trace pauses 4 s after
    // every 4 000 packets): each packet runs in the mode the hysteresis gives
    // at its shard's number of flows, packet by packet, and in bursts the
    // same as packet by packet (its flows' timeouts, its counters)
    let spec = TraceSpec {
        flows: 3_000,
        packets: 20_000,
        active_flows: 150,
        ..Default::default()
    };
    let mut pkts: Vec<_> = Generator::new(&spec).unwrap().collect();
    for (i, p) in pkts.iter_mut().enumerate() {
        p.ts_ns = i as u64 * 1_000_000 + (i as u64 / 4_000) * 4_000_000_000;
    }
    let cfg = short_timeouts(
        "[table]\ncapacity = 64\nemergency_high = 0.5\nemergency_low = 0.3\n",
        ("3s", "3s"),
        "emergency = \"300ms\"\n",
    );
    let Twins {
        mut one,
        mut s1,
        mut c,
        mut s,
        mut parsed,
    } = fused_twins(&cfg, &pkts);
    let mut out = Vec::new();
    let (mut in_emergency, mut left) = (0, 0);
    let mut mode = [false; 4];
    for chunk in parsed.chunks_mut(32) {
        let now = chunk[0].ts_ns;
        let mut want = Vec::new();
        for p in chunk.iter() {
            let mut q = one.packet(p.data.clone(), p.ts_ns).unwrap();
            let i = one.shard_of(q.hash);
            // the mode a packet runs in: the hysteresis (32 and 19 of 64) at
            // its shard's number of flows once the packet's entry is there
            // (a new flow's made, room made for it by an eviction)
            let (len, st) = (s1[i].table.len(), s1[i].table.stats().clone());
            want.push((one.process(&mut s1[i], &mut q, now), q.data));
            let after = s1[i].table.stats();
            let len = len + (after.inserted - st.inserted) as usize
                - (after.evicted - st.evicted) as usize;
            mode[i] = if mode[i] { len > 19 } else { len >= 32 };
            assert_eq!(s1[i].emergency, mode[i], "mode at {now} ns, {len} flows");
        }
        c.process_burst(&mut s, chunk, now, &mut out);
        let got: Vec<_> = out
            .iter()
            .copied()
            .zip(chunk.iter().map(|p| p.data.clone()))
            .collect();
        assert_same(&one, &c, &want, &got);
        for (a, b) in s1.iter_mut().zip(s.iter_mut()) {
            let b = b.as_mut().unwrap();
            assert_eq!(a.emergency, b.emergency, "mode at {now} ns");
            in_emergency += usize::from(a.emergency);
            let was = a.emergency;
            one.expire(a, now);
            c.expire(b, now);
            assert_eq!(a.table.len(), b.table.len(), "entries at {now} ns");
            // (the mode follows on the next packet: count the drains that
            // will take a shard out of it)
            left += usize::from(was && a.table.len() <= 19);
        }
    }
    // (the shards went into emergency mode many times, and out of it)
    assert!(one.counters().emergencies > 4, "{:?}", one.counters());
    assert!(in_emergency > 0 && left > 0, "{in_emergency} {left}");
}

/// Counts a flow's packets in its slot and deletes its state at every third:
/// the flow's next packet finds no entry and starts over, as the original
/// direction of a new entry (counted by direction: a packet that ran in the
/// old entry would be counted as a reply).
#[derive(Clone)]
struct EveryThird {
    meta: NfMeta,
    restarts: u64,
    replies: u64,
}

impl Default for EveryThird {
    fn default() -> EveryThird {
        EveryThird {
            meta: NfMeta::new(
                "every-third",
                "every-third",
                NflowKey::BiFiveTuple,
                StateKind::PerFlow,
            )
            .deleting_state(),
            restarts: 0,
            replies: 0,
        }
    }
}

impl Nf for EveryThird {
    fn meta(&self) -> &NfMeta {
        &self.meta
    }
    fn process(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        self.replies += u64::from(pkt.dir == state::Dir::Reply);
        let n = match cx.get() {
            Some(FlowState::Seq(s)) => s.last + 1,
            _ => {
                self.restarts += 1;
                1
            }
        };
        if n == 3 {
            cx.delete();
        } else {
            cx.insert(FlowState::Seq(SeqState { last: n }));
        }
        Verdict::Forward
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("restarts", self.restarts), ("replies", self.replies)]
    }
    fn instance(&self) -> Box<dyn Nf> {
        Box::new(EveryThird::default())
    }
}

#[test]
fn a_flow_whose_state_an_nf_deletes_starts_over_as_it_would_packet_by_packet() {
    let pkts = heavy_hitters();
    let make = || {
        let c = Chain::new(
            vec![Box::new(EveryThird::default())],
            ChainOptions::default(),
        )
        .unwrap();
        let s = c.new_shards();
        (c, s)
    };
    let (mut one, mut s1) = make();
    let expected = singles(&mut one, &mut s1, &pkts);
    let (mut c, s) = make();
    let mut s: Vec<Option<Shard>> = s.into_iter().map(Some).collect();
    let got = bursts(&mut c, &mut s, &pkts, 32, None);
    assert_same(&one, &c, &expected, &got);
    let restarts = one.nfs()[0].counters()[0].1;
    assert!(restarts > pkts.len() as u64 / 4, "{restarts}");
    let lens: Vec<usize> = s.iter().map(|x| x.as_ref().unwrap().table.len()).collect();
    let want: Vec<usize> = s1.iter().map(|x| x.table.len()).collect();
    assert_eq!(lens, want);
}

/// Each packet's flow state as the router sees it, with bursts of `burst`.
fn snapshots(
    pkts: &[trace::GenPacket],
    burst: usize,
    routing: Routing,
) -> Vec<Vec<Option<FlowState>>> {
    let (mut c, s) = chain(&fw_nat_seq());
    let mut s: Vec<Option<Shard>> = s.into_iter().map(Some).collect();
    let mut parsed: Vec<Packet> = pkts
        .iter()
        .map(|p| c.packet(p.frame.clone(), p.ts_ns).unwrap())
        .collect();
    let mut seen = vec![Vec::new(); pkts.len()];
    let mut routed = Vec::new();
    for (b, chunk) in parsed.chunks_mut(burst).enumerate() {
        let now = chunk[0].ts_ns;
        c.process_burst_routed(&mut s, chunk, now, &mut routed, routing, |i, _, hit| {
            seen[b * burst + i] = (0..3)
                .map(|nf| hit.shard.table.slot(hit.entry, nf).clone())
                .collect();
            true
        });
    }
    seen
}

#[test]
fn a_router_that_reads_state_sees_what_the_flows_earlier_packets_left() {
    let pkts = heavy_hitters();
    // one packet per burst: what a packet-by-packet run's router would see
    let alone = snapshots(&pkts, 1, Routing::ReadsState);
    assert_eq!(snapshots(&pkts, 32, Routing::ReadsState), alone);
    // (a router that only observes may see a state its flow's earlier
    // packets of the burst have not changed yet)
    assert_ne!(snapshots(&pkts, 32, Routing::Observes), alone);
}

/// A chain that is one fused firewall → NAT pair runs each found packet as
/// soon as the router keeps it: packets the router leaves to the caller are
/// untouched and the rest give what they give one at a time without them;
/// the router asks the pair's NFs, by their own slots, whether the flow can
/// be offloaded.
#[test]
fn a_fused_pairs_router_leaves_packets_untouched_and_asks_its_nfs() {
    // IPv6 connections among the trace's: the NAT passes them without a
    // mapping, so their entries cannot be offloaded
    let mut pkts = heavy_hitters();
    for k in 0..60u16 {
        let (c, s) = (
            IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, k]),
            IpAddr::from([0x2001, 0xdb8, 1, 0, 0, 0, 0, 1]),
        );
        let at = usize::from(k) * 300;
        let ts = pkts[at].ts_ns;
        let syn = common::frame("tcp", c, 40_000 + k, s, 80, TcpFlags::SYN, b"");
        let ack = common::frame(
            "tcp",
            s,
            80,
            c,
            40_000 + k,
            TcpFlags::SYN | TcpFlags::ACK,
            b"",
        );
        let data = common::frame("tcp", c, 40_000 + k, s, 80, TcpFlags::ACK, b"x");
        for (j, f) in [syn, ack, data.clone(), data].into_iter().enumerate() {
            pkts.insert(
                at + 4 * j,
                trace::GenPacket {
                    ts_ns: ts,
                    frame: f,
                },
            );
        }
    }
    let cfg = "[steering]\nshards = 4\n[[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\\nallow any 2001:db8::/32 -> any\"\n\
               [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n";
    let (mut c, s) = chain(cfg);
    assert_eq!(c.fused(), vec![(0, 1)]);
    let mut s: Vec<Option<Shard>> = s.into_iter().map(Some).collect();
    let mut parsed: Vec<Packet> = pkts
        .iter()
        .map(|p| c.packet(p.frame.clone(), p.ts_ns).unwrap())
        .collect();
    let mut left = vec![false; pkts.len()];
    let mut asked = Vec::new();
    let mut routed = Vec::new();
    for (b, chunk) in parsed.chunks_mut(32).enumerate() {
        let now = chunk[0].ts_ns;
        c.process_burst_routed(
            &mut s,
            chunk,
            now,
            &mut routed,
            Routing::Observes,
            |i, _, hit| {
                let slots: Vec<_> = (0..2)
                    .map(|nf| hit.shard.table.slot(hit.entry, nf).clone())
                    .collect();
                asked.push((hit.offloadable(), slots));
                let leave = (b * 32 + i) % 3 == 0;
                left[b * 32 + i] = leave;
                !leave
            },
        );
        for (k, (v, p)) in routed.iter().zip(chunk.iter()).enumerate() {
            let i = b * 32 + k;
            assert_eq!(v.is_none(), left[i], "packet {i}");
            if left[i] {
                assert_eq!(p.data, pkts[i].frame, "packet {i} was left untouched");
            }
        }
    }
    assert!(left.iter().filter(|l| **l).count() > 5_000);
    // the router's answer is what the NFs say of their slots
    for (offloadable, slots) in &asked {
        let want = c
            .nfs()
            .iter()
            .zip(slots)
            .all(|(nf, slot)| nf.offloadable(slot.as_ref()));
        assert_eq!(*offloadable, want);
    }
    assert!(asked.iter().any(|(o, _)| *o));
    assert!(asked.iter().any(|(o, _)| !*o));
    // packet by packet without the packets left: the same bytes and counters
    let (mut one, mut s1) = chain(cfg);
    for (i, p) in pkts.iter().enumerate() {
        if left[i] {
            continue;
        }
        let mut q = one.packet(p.frame.clone(), p.ts_ns).unwrap();
        let sh = one.shard_of(q.hash);
        one.process(&mut s1[sh], &mut q, p.ts_ns);
        assert_eq!(q.data, parsed[i].data, "packet {i}");
    }
    assert_eq!(one.counters(), c.counters());
    for (x, y) in one.nfs().iter().zip(c.nfs()) {
        assert_eq!(x.counters(), y.counters(), "{}", x.name());
    }
}
