//! The trace generator: a deterministic iterator of packets built from a
//! [`TraceSpec`].
//!
//! 1. Flows get a protocol, an address family, a class and endpoints; their sizes
//!    follow Zipf(α) by rank, and ranks are shuffled so size and start time are
//!    independent.
//! 2. Lifetimes `equal`: at most `active_flows` connections are open at once. Each
//!    packet slot picks an open connection with probability proportional to its
//!    size (a Fenwick tree), so every connection lives about as long as the others
//!    and elephants send faster; a finished connection is replaced by the next one.
//!    Lifetimes `sized:β`: each connection has a planned start and lifetime
//!    (∝ size^β, scaled so `active_flows` are open on average, at most the
//!    trace) and sends at size / lifetime; each packet picks a live connection in
//!    proportion to its rate and advances the planned clock by 1 / (sum of the
//!    live rates), so a connection sends about its rate per planned slot.
//! 3. TCP connections open with SYN, SYN-ACK, ACK, carry data both ways with
//!    consistent sequence and acknowledgment numbers, and close with FIN, FIN-ACK,
//!    ACK. UDP flows carry data both ways.
//! 4. Timestamps follow the arrival process at the target rate.
//!
//! 5. With `syn_flood`, spoofed SYNs (never answered, no tag) are spread among
//!    the connections' packets after the first `syn_flood_after` share of them.
//!
//! Every connection packet carries the connection's sequence tag ([`wire::seqtag`]).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::collections::HashSet;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, L4Repr, PacketRepr, TcpRepr};
use wire::{seqtag, FiveTuple, TcpFlags};

use crate::fenwick::Fenwick;
use crate::spec::{
    share_count, Arrival, Lifetimes, Rate, SizeDist, SpecError, TraceSpec, TCP_MIN_PACKETS,
};
use crate::{zipf, FCS_LEN};

/// Timestamp of the first packet: 2020-09-13T12:26:40Z, in ns since the epoch.
pub const START_NS: u64 = 1_600_000_000 * 1_000_000_000;

/// MAC of the client side (locally administered).
pub const CLIENT_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
/// MAC of the server side.
pub const SERVER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];

/// One generated packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenPacket {
    /// Timestamp, ns since the epoch.
    pub ts_ns: u64,
    /// The frame, without FCS.
    pub frame: Vec<u8>,
}

/// What a generator produced (known before the first packet).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GenSummary {
    /// Connections.
    pub flows: u32,
    /// TCP connections (each with exactly one SYN without ACK).
    pub tcp_flows: u32,
    /// UDP flows.
    pub udp_flows: u32,
    /// IPv6 connections.
    pub ipv6_flows: u32,
    /// Connections in the priority class.
    pub priority_flows: u32,
    /// Packets.
    pub packets: u64,
    /// Packets of the largest connection.
    pub largest_flow: u64,
    /// Spoofed SYNs of the flood (counted in `packets`).
    pub syn_flood: u64,
}

#[derive(Clone, Debug)]
struct Flow {
    tuple: FiveTuple, // client → server
    tcp: bool,
    priority: bool,
    size: u64,
    sent: u64,
    seq_c: u32,
    seq_s: u32,
}

/// The packet generator. Iterate it to get the packets in timestamp order.
pub struct Generator {
    spec: TraceSpec,
    rng: ChaCha8Rng,
    flows: Vec<Flow>,
    next_flow: usize,
    active: Fenwick,
    slot_flow: Vec<Option<usize>>,
    vclock_ns: f64,
    emitted: u64,
    summary: GenSummary,
    flood: Flood,
    planned: Option<Planned>,
}

/// Fixed-point scale of a connection's rate (packets per planned slot, ≤ 1) in
/// the Fenwick tree.
const RATE_ONE: f64 = (1u64 << 32) as f64;

/// `sized` lifetimes: the connections' planned starts, in order, and the
/// planned clock (in packet slots). The Fenwick tree is indexed by connection.
#[derive(Clone, Debug)]
struct Planned {
    starts: Vec<(f64, usize)>,
    next: usize,
    clock: f64,
    rate: Vec<u64>,
}

/// The SYN flood's progress: it starts after `start` connection packets and
/// then sends `per_packet` SYNs per connection packet (accumulated in `due`).
#[derive(Clone, Debug)]
struct Flood {
    left: u64,
    start: u64,
    per_packet: f64,
    due: f64,
    legit: u64,
}

impl Generator {
    /// Validates the spec and lays out every flow.
    pub fn new(spec: &TraceSpec) -> Result<Generator, SpecError> {
        spec.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
        let n = spec.flows as usize;
        let mut idx: Vec<usize> = (0..n).collect();
        let pick = |rng: &mut ChaCha8Rng, idx: &mut Vec<usize>, k: u32| -> Vec<bool> {
            idx.shuffle(rng);
            let mut v = vec![false; idx.len()];
            for &i in &idx[..k as usize] {
                v[i] = true;
            }
            v
        };
        let tcp = pick(&mut rng, &mut idx, spec.tcp_flows());
        let v6 = pick(&mut rng, &mut idx, spec.ipv6_flows());
        let prio = pick(
            &mut rng,
            &mut idx,
            share_count(spec.flows, spec.priority_share),
        );

        // Sizes by rank, then ranks shuffled onto flows.
        let mut ranks: Vec<usize> = (0..n).collect();
        ranks.shuffle(&mut rng);
        let mut mins = vec![0u64; n];
        for f in 0..n {
            mins[ranks[f]] = if tcp[f] { TCP_MIN_PACKETS } else { 1 };
        }
        let by_rank = zipf::sizes(&mins, spec.alpha, spec.packets);
        let mut prio = prio;
        if spec.priority_traffic > 0.0 {
            // the shortest connections (ties in flow order, which is random)
            // until their packets reach the share of the trace
            let mut by_size: Vec<usize> = (0..n).collect();
            by_size.sort_by_key(|&f| by_rank[ranks[f]]);
            let want = (spec.packets as f64 * spec.priority_traffic).round() as u64;
            let mut got = 0;
            prio = vec![false; n];
            for f in by_size {
                if got >= want {
                    break;
                }
                prio[f] = true;
                got += by_rank[ranks[f]];
            }
        }

        let mut seen = HashSet::with_capacity(n);
        let mut flows = Vec::with_capacity(n);
        for f in 0..n {
            let tuple = loop {
                let mut t = endpoints(&mut rng, tcp[f], v6[f]);
                if let Some(s) = spec.server {
                    t.dst = IpAddr::V4(*s.ip());
                    t.dst_port = s.port();
                }
                if seen.insert(t.canonical().0) {
                    break t;
                }
            };
            flows.push(Flow {
                tuple,
                tcp: tcp[f],
                priority: prio[f],
                size: by_rank[ranks[f]],
                sent: 0,
                seq_c: rng.gen(),
                seq_s: rng.gen(),
            });
        }
        let k = (spec.active_flows as usize).min(n);
        let planned = match spec.lifetimes {
            Lifetimes::Equal => None,
            Lifetimes::Sized(beta) => Some(plan_lifetimes(&flows, beta, spec, &mut rng)),
        };
        let slots = if planned.is_some() { n } else { k };
        let mut g = Generator {
            summary: GenSummary {
                flows: spec.flows,
                tcp_flows: spec.tcp_flows(),
                udp_flows: spec.flows - spec.tcp_flows(),
                ipv6_flows: spec.ipv6_flows(),
                priority_flows: prio.iter().filter(|p| **p).count() as u32,
                packets: spec.packets + spec.syn_flood,
                largest_flow: by_rank.first().copied().unwrap_or(0),
                syn_flood: spec.syn_flood,
            },
            flood: {
                let start = (spec.packets as f64 * spec.syn_flood_after) as u64;
                Flood {
                    left: spec.syn_flood,
                    start,
                    per_packet: spec.syn_flood as f64 / (spec.packets - start).max(1) as f64,
                    due: 0.0,
                    legit: 0,
                }
            },
            spec: spec.clone(),
            rng,
            flows,
            next_flow: 0,
            active: Fenwick::new(slots),
            slot_flow: vec![None; slots],
            vclock_ns: 0.0,
            emitted: 0,
            planned,
        };
        if g.planned.is_some() {
            g.open_planned();
        } else {
            for slot in 0..k {
                g.open_next(slot);
            }
        }
        Ok(g)
    }

    /// What this generator will produce.
    pub fn summary(&self) -> &GenSummary {
        &self.summary
    }

    fn open_next(&mut self, slot: usize) {
        if self.next_flow < self.flows.len() {
            let f = self.next_flow;
            self.next_flow += 1;
            self.slot_flow[slot] = Some(f);
            self.active.set(slot, self.flows[f].size);
        } else {
            self.slot_flow[slot] = None;
            self.active.set(slot, 0);
        }
    }

    /// `sized` lifetimes: opens every connection whose planned start has come;
    /// with none live, the clock jumps to the next start.
    fn open_planned(&mut self) {
        let Some(p) = self.planned.as_mut() else {
            return;
        };
        if self.active.total() == 0 {
            if let Some(&(s, _)) = p.starts.get(p.next) {
                p.clock = p.clock.max(s);
            }
        }
        while let Some(&(s, f)) = p.starts.get(p.next) {
            if s > p.clock {
                break;
            }
            p.next += 1;
            self.slot_flow[f] = Some(f);
            self.active.set(f, p.rate[f]);
        }
    }

    fn data_size(&mut self) -> u32 {
        match self.spec.sizes {
            SizeDist::Fixed(s) => u32::from(s),
            SizeDist::Imix => match self.rng.gen_range(0..12) {
                0..=6 => 64,
                7..=10 => 570,
                _ => 1518,
            },
            SizeDist::Campus => {
                let u: f64 = self.rng.gen();
                if u < 0.2 {
                    self.rng.gen_range(64..=74)
                } else if u < 0.7 {
                    1518
                } else {
                    self.rng.gen_range(75..1518)
                }
            }
        }
    }

    /// Mean gap in ns for a packet of `wire_len` bytes at the target rate.
    fn mean_gap_ns(&self, wire_len: u32) -> f64 {
        match self.spec.rate {
            Rate::Gbps(g) => f64::from(wire_len) * 8.0 / g,
            Rate::Mpps(m) => 1e3 / m,
        }
    }

    fn timestamp(&mut self, wire_len: u32) -> u64 {
        let mean = self.mean_gap_ns(wire_len);
        let (gap, duty) = match self.spec.arrival {
            Arrival::Constant => (mean, None),
            Arrival::Poisson => (
                Exp::new(1.0 / mean)
                    .map(|e| e.sample(&mut self.rng))
                    .unwrap_or(mean),
                None,
            ),
            Arrival::OnOff { on_us, off_us } => {
                let (on, off) = (f64::from(on_us) * 1e3, f64::from(off_us) * 1e3);
                (mean * on / (on + off), Some((on, off)))
            }
        };
        // The first packet is at START_NS; each later one one gap after the previous.
        let t = self.vclock_ns;
        self.vclock_ns += gap;
        let real = match duty {
            None => t,
            // virtual time runs only during bursts: insert an off period per burst
            Some((on, off)) => t + (t / on).floor() * off,
        };
        START_NS + real.round() as u64
    }

    /// A SYN of the flood: random client address and port, random server, port 80.
    fn spoofed_syn(&mut self) -> PacketRepr {
        let src = Ipv4Addr::from(0x0a00_0000u32 | (self.rng.gen::<u32>() >> 8));
        let dst = Ipv4Addr::from(0xc612_0000u32 | (self.rng.gen::<u32>() >> 15));
        PacketRepr {
            eth: EthernetRepr {
                src: CLIENT_MAC,
                dst: SERVER_MAC,
                vlan: None,
            },
            ip: IpRepr::V4(Ipv4Repr {
                src,
                dst,
                dscp: 0,
                ecn: 0,
                ident: self.rng.gen(),
                dont_frag: true,
                ttl: 64,
                options: vec![],
            }),
            l4: L4Repr::Tcp(TcpRepr {
                src_port: self.rng.gen_range(1024..=65535),
                dst_port: 80,
                seq: self.rng.gen(),
                ack: 0,
                flags: TcpFlags::SYN,
                window: 64240,
                urgent: 0,
                options: vec![],
            }),
            payload: vec![],
        }
    }

    fn build(&mut self, fi: usize) -> PacketRepr {
        let data_size = self.data_size();
        let (k, n) = (self.flows[fi].sent, self.flows[fi].size);
        let (l4, from_client) = self.l4_repr(fi);
        let f = &self.flows[fi];
        let t = if from_client {
            f.tuple
        } else {
            f.tuple.reversed()
        };
        let dscp = if f.priority {
            self.spec.priority_dscp
        } else {
            0
        };
        let ip = ip_repr(&t, dscp, (k as u16).wrapping_add(fi as u16));
        let eth = if from_client {
            EthernetRepr {
                src: CLIENT_MAC,
                dst: SERVER_MAC,
                vlan: None,
            }
        } else {
            EthernetRepr {
                src: SERVER_MAC,
                dst: CLIENT_MAC,
                vlan: None,
            }
        };
        // Payload: the tag, then filler up to the data size (control packets: the tag only).
        let is_data = !f.tcp || (3..n.saturating_sub(3)).contains(&k);
        let mut p = PacketRepr {
            eth,
            ip,
            l4,
            payload: vec![],
        };
        let hdr = p.header_len() as u32;
        let want = if is_data {
            data_size.saturating_sub(FCS_LEN)
        } else {
            0
        };
        let pay_len = (want.saturating_sub(hdr) as usize).max(seqtag::LEN);
        let mut payload = vec![0u8; pay_len];
        payload[..seqtag::LEN].copy_from_slice(&seqtag::encode(k as u32));
        for (i, b) in payload[seqtag::LEN..].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(k as u8);
        }
        let f = &mut self.flows[fi];
        match &mut p.l4 {
            L4Repr::Tcp(tcp) => {
                tcp.src_port = t.src_port;
                tcp.dst_port = t.dst_port;
                let consumed = pay_len as u32
                    + u32::from(tcp.flags.contains(TcpFlags::SYN))
                    + u32::from(tcp.flags.contains(TcpFlags::FIN));
                let (mine, theirs) = if from_client {
                    (&mut f.seq_c, f.seq_s)
                } else {
                    (&mut f.seq_s, f.seq_c)
                };
                tcp.seq = *mine;
                tcp.ack = if k == 0 { 0 } else { theirs };
                *mine = mine.wrapping_add(consumed);
            }
            L4Repr::Udp { src_port, dst_port } => {
                *src_port = t.src_port;
                *dst_port = t.dst_port;
            }
            L4Repr::IcmpEcho { .. } => {}
        }
        p.payload = payload;
        p
    }

    /// Flow `fi`'s next packet's L4 header (ports and sequence numbers
    /// filled in later) and whether the client sends it: a TCP flow's
    /// handshake, data both ways, and close; a UDP flow's first packet from
    /// the client, then either way.
    fn l4_repr(&mut self, fi: usize) -> (L4Repr, bool) {
        let f = &self.flows[fi];
        let (k, n) = (f.sent, f.size);
        let from_client;
        let l4 = if f.tcp {
            let (flags, client) = match k {
                0 => (TcpFlags::SYN, true),
                1 => (TcpFlags::SYN | TcpFlags::ACK, false),
                2 => (TcpFlags::ACK, true),
                _ if k == n - 3 => (TcpFlags::FIN | TcpFlags::ACK, true),
                _ if k == n - 2 => (TcpFlags::FIN | TcpFlags::ACK, false),
                _ if k == n - 1 => (TcpFlags::ACK, true),
                _ => (TcpFlags::PSH | TcpFlags::ACK, self.rng.gen_bool(0.4)),
            };
            from_client = client;
            L4Repr::Tcp(TcpRepr {
                src_port: 0,
                dst_port: 0,
                seq: 0,
                ack: 0,
                flags,
                window: 64240,
                urgent: 0,
                options: vec![],
            })
        } else {
            from_client = k == 0 || self.rng.gen_bool(0.5);
            L4Repr::Udp {
                src_port: 0,
                dst_port: 0,
            }
        };
        (l4, from_client)
    }
}

/// An IP header from `t`'s addresses (IPv4 when both are).
fn ip_repr(t: &FiveTuple, dscp: u8, ident: u16) -> IpRepr {
    match (t.src, t.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
            src: s,
            dst: d,
            dscp,
            ecn: 0,
            ident,
            dont_frag: true,
            ttl: 64,
            options: vec![],
        }),
        (s, d) => IpRepr::V6(Ipv6Repr {
            src: as_v6(s),
            dst: as_v6(d),
            traffic_class: dscp << 2,
            flow_label: 0,
            hop_limit: 64,
        }),
    }
}

impl Iterator for Generator {
    type Item = GenPacket;

    fn next(&mut self) -> Option<GenPacket> {
        let total = self.active.total();
        let fl = &mut self.flood;
        if fl.left > 0 && (fl.due >= 1.0 || total == 0) {
            fl.due -= 1.0;
            fl.left -= 1;
            let frame = self.spoofed_syn().to_bytes();
            let ts_ns = self.timestamp(frame.len() as u32 + FCS_LEN);
            self.emitted += 1;
            return Some(GenPacket { ts_ns, frame });
        }
        if total == 0 {
            return None;
        }
        fl.legit += 1;
        if fl.legit > fl.start {
            fl.due += fl.per_packet;
        }
        let slot = self.active.find(self.rng.gen_range(0..total));
        let fi = self.slot_flow[slot].expect("a weighted slot holds a flow");
        let repr = self.build(fi);
        let frame = repr.to_bytes();
        let ts_ns = self.timestamp(frame.len() as u32 + FCS_LEN);
        let f = &mut self.flows[fi];
        f.sent += 1;
        let done = f.sent == f.size;
        if let Some(p) = self.planned.as_mut() {
            // one packet of a total rate of `total` per planned slot
            p.clock += RATE_ONE / total as f64;
            if done {
                self.active.set(slot, 0);
            }
            self.open_planned();
        } else if done {
            self.open_next(slot);
        }
        self.emitted += 1;
        Some(GenPacket { ts_ns, frame })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.summary.packets - self.emitted) as usize;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Generator {}

/// `sized:β` lifetimes: lifetime_i = min(c · size_i^β, P) with c chosen so the
/// lifetimes add up to `active_flows` × P (that many open on average), where P
/// is the trace's connection packets; never shorter than the connection's size
/// (at most one packet per slot); starts uniform in [0, P − lifetime].
fn plan_lifetimes(flows: &[Flow], beta: f64, spec: &TraceSpec, rng: &mut ChaCha8Rng) -> Planned {
    let p = spec.packets as f64;
    let raw: Vec<f64> = flows.iter().map(|f| (f.size as f64).powf(beta)).collect();
    let life = |c: f64, i: usize| (c * raw[i]).min(p).max(flows[i].size as f64);
    let want = f64::from(spec.active_flows) * p;
    let sum = |c: f64| (0..flows.len()).map(|i| life(c, i)).sum::<f64>();
    // the sum grows with c: bisect on a log scale
    let (mut lo, mut hi) = (1e-12f64, 1.0f64);
    while sum(hi) < want && hi < 1e18 {
        hi *= 16.0;
    }
    for _ in 0..100 {
        let mid = (lo * hi).sqrt();
        if sum(mid) < want {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let mut starts = Vec::with_capacity(flows.len());
    let mut rate = Vec::with_capacity(flows.len());
    for (i, f) in flows.iter().enumerate() {
        let l = life(hi, i);
        starts.push((rng.gen_range(0.0..=(p - l).max(0.0)), i));
        rate.push(((f.size as f64 / l) * RATE_ONE).max(1.0) as u64);
    }
    starts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    Planned {
        starts,
        next: 0,
        clock: 0.0,
        rate,
    }
}

fn as_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// Random endpoints: clients in 10.0.0.0/8 (fd00::/8), servers in the benchmarking
/// range 198.18.0.0/15 (2001:db8::/32), well-known server ports.
fn endpoints(rng: &mut ChaCha8Rng, tcp: bool, v6: bool) -> FiveTuple {
    let (src, dst) = if v6 {
        let c: u128 = (0xfd00u128 << 112) | (rng.gen::<u128>() >> 8);
        let s: u128 = (0x2001_0db8u128 << 96) | (rng.gen::<u128>() >> 32);
        (IpAddr::V6(Ipv6Addr::from(c)), IpAddr::V6(Ipv6Addr::from(s)))
    } else {
        let c = 0x0a00_0000u32 | (rng.gen::<u32>() >> 8);
        let s = 0xc612_0000u32 | (rng.gen::<u32>() >> 15);
        (IpAddr::V4(Ipv4Addr::from(c)), IpAddr::V4(Ipv4Addr::from(s)))
    };
    const TCP_PORTS: [u16; 6] = [443, 443, 443, 80, 80, 22];
    const UDP_PORTS: [u16; 4] = [53, 443, 123, 4789];
    let dst_port = if tcp {
        *TCP_PORTS.choose(rng).expect("non-empty")
    } else {
        *UDP_PORTS.choose(rng).expect("non-empty")
    };
    FiveTuple {
        src,
        dst,
        src_port: rng.gen_range(1024..=65535),
        dst_port,
        proto: if tcp {
            wire::proto::TCP
        } else {
            wire::proto::UDP
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn small() -> TraceSpec {
        TraceSpec {
            flows: 50,
            packets: 3000,
            active_flows: 8,
            ..Default::default()
        }
    }

    /// The flood's SYNs come after the connections' first quarter, spread evenly
    /// over the rest, each a lone SYN of its own 5-tuple; the connections'
    /// packets are the same as without a flood.
    #[test]
    fn syn_flood_is_spread_after_its_start() {
        let spec = TraceSpec {
            syn_flood: 6000,
            syn_flood_after: 0.25,
            ..small()
        };
        let g = Generator::new(&spec).unwrap();
        assert_eq!(g.summary().packets, 9000);
        assert_eq!(g.len(), 9000);
        let all: Vec<GenPacket> = g.collect();
        assert_eq!(all.len(), 9000);
        assert!(all.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
        let is_flood = |p: &GenPacket| {
            let i = wire::parse(&p.frame).unwrap();
            i.payload_len == 0
                && i.l4
                    == wire::L4Info::Tcp {
                        flags: TcpFlags::SYN,
                    }
                && i.tuple.dst_port == 80
        };
        let flood: Vec<usize> = (0..all.len()).filter(|&i| is_flood(&all[i])).collect();
        assert_eq!(flood.len(), 6000);
        // connection packets before the first flood SYN: the first quarter
        assert_eq!(flood[0], 751);
        // evenly spread: each third of the flood period holds a third of it
        let span = (all.len() - flood[0]) / 3;
        for k in 0..3 {
            let n = flood
                .iter()
                .filter(|&&i| (flood[0] + k * span..flood[0] + (k + 1) * span).contains(&i))
                .count();
            assert!((1900..=2100).contains(&n), "third {k}: {n}");
        }
        let tuples: HashSet<_> = flood
            .iter()
            .map(|&i| wire::parse(&all[i].frame).unwrap().tuple)
            .collect();
        assert!(tuples.len() > 5990, "{}", tuples.len());
        let legit = all.len() - flood.len();
        let plain = Generator::new(&TraceSpec {
            syn_flood: 0,
            ..spec.clone()
        })
        .unwrap();
        assert_eq!(legit, plain.len());
    }

    #[test]
    fn deterministic_and_seed_sensitive() {
        let a: Vec<GenPacket> = Generator::new(&small()).unwrap().collect();
        let b: Vec<GenPacket> = Generator::new(&small()).unwrap().collect();
        assert_eq!(a, b);
        let c: Vec<GenPacket> = Generator::new(&TraceSpec { seed: 2, ..small() })
            .unwrap()
            .collect();
        assert_ne!(a, c);
    }

    #[test]
    fn counts_order_and_handshakes() {
        let g = Generator::new(&small()).unwrap();
        let summary = g.summary().clone();
        let pkts: Vec<GenPacket> = g.collect();
        assert_eq!(pkts.len() as u64, summary.packets);
        assert!(
            pkts.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns),
            "timestamps sorted"
        );
        let mut per_conn: HashMap<wire::BiFlowKey, Vec<u32>> = HashMap::new();
        let mut syns = 0;
        for p in &pkts {
            let info = wire::parse(&p.frame).unwrap();
            if let wire::L4Info::Tcp { flags } = info.l4 {
                syns += u32::from(flags.is_syn_only());
            }
            let seq = seqtag::decode(info.payload(&p.frame)).expect("every packet is tagged");
            per_conn
                .entry(info.tuple.canonical().0)
                .or_default()
                .push(seq);
        }
        assert_eq!(syns, summary.tcp_flows);
        assert_eq!(per_conn.len() as u32, summary.flows);
        for seqs in per_conn.values() {
            assert!(
                seqs.iter().enumerate().all(|(i, s)| *s == i as u32),
                "in-order tags"
            );
        }
    }

    /// Equal lifetimes bound the open connections by `active_flows` (sized
    /// ones meet it on average).
    #[test]
    fn concurrency_is_bounded_by_active_flows() {
        let spec = TraceSpec {
            lifetimes: Lifetimes::Equal,
            ..small()
        };
        let pkts: Vec<GenPacket> = Generator::new(&spec).unwrap().collect();
        let mut first = HashMap::new();
        let mut last = HashMap::new();
        for (i, p) in pkts.iter().enumerate() {
            let k = wire::parse(&p.frame).unwrap().tuple.canonical().0;
            first.entry(k).or_insert(i);
            last.insert(k, i);
        }
        for i in (0..pkts.len()).step_by(97) {
            let open = first
                .iter()
                .filter(|(k, f)| **f <= i && last[*k] >= i)
                .count();
            assert!(open <= spec.active_flows as usize, "{open} open at {i}");
        }
    }

    #[test]
    fn rates_are_met() {
        for arrival in [
            Arrival::Constant,
            Arrival::Poisson,
            Arrival::OnOff {
                on_us: 50,
                off_us: 50,
            },
        ] {
            let spec = TraceSpec {
                rate: Rate::Mpps(1.0),
                arrival,
                ..small()
            };
            let pkts: Vec<GenPacket> = Generator::new(&spec).unwrap().collect();
            let dur = (pkts.last().unwrap().ts_ns - pkts[0].ts_ns) as f64;
            let mpps = (pkts.len() - 1) as f64 / dur * 1e3;
            assert!((mpps - 1.0).abs() < 0.1, "{arrival}: {mpps} Mpps");
        }
    }

    /// Per connection: first and last packet index.
    fn spans(pkts: &[GenPacket]) -> Vec<(usize, usize, u64)> {
        let mut m = HashMap::new();
        for (i, p) in pkts.iter().enumerate() {
            let k = wire::parse(&p.frame).unwrap().tuple.canonical().0;
            let e = m.entry(k).or_insert((i, i, 0));
            e.1 = i;
            e.2 += 1;
        }
        m.into_values().collect()
    }

    #[test]
    fn sized_lifetimes_keep_elephants_long_and_concurrency_on_target() {
        let base = TraceSpec {
            flows: 2000,
            packets: 200_000,
            alpha: 1.1,
            active_flows: 200,
            ..small()
        };
        let mut elephant_span = Vec::new();
        for lifetimes in [
            Lifetimes::Equal,
            Lifetimes::Sized(1.0),
            Lifetimes::Sized(0.5),
        ] {
            let spec = TraceSpec {
                lifetimes,
                ..base.clone()
            };
            let pkts: Vec<GenPacket> = Generator::new(&spec).unwrap().collect();
            assert_eq!(pkts.len() as u64, spec.packets, "{lifetimes}");
            let sp = spans(&pkts);
            assert_eq!(sp.len(), 2000, "{lifetimes}: every connection sends");
            let big = sp.iter().max_by_key(|v| v.2).unwrap();
            elephant_span.push((big.1 - big.0) as f64 / pkts.len() as f64);
            // mean concurrency: the connections' spans add up to about
            // active_flows × the trace
            let open: f64 =
                sp.iter().map(|v| (v.1 - v.0 + 1) as f64).sum::<f64>() / pkts.len() as f64;
            if lifetimes != Lifetimes::Equal {
                assert!(
                    (120.0..=300.0).contains(&open),
                    "{lifetimes}: {open} open on average"
                );
            }
        }
        // equal lifetimes: the largest connection is over within a fraction of
        // the trace; sized:1 spreads it over most of it
        assert!(elephant_span[0] < 0.35, "{elephant_span:?}");
        assert!(elephant_span[1] > 0.6, "{elephant_span:?}");
        assert!(elephant_span[2] > elephant_span[0], "{elephant_span:?}");
    }

    #[test]
    fn lifetimes_parse_and_validate() {
        for s in ["equal", "sized:0.5", "sized:1"] {
            assert_eq!(s.parse::<Lifetimes>().unwrap().to_string(), s);
        }
        for s in ["sized:1.5", "sized:-0.1", "sized:x", "long"] {
            assert!(s.parse::<Lifetimes>().is_err(), "{s}");
        }
        let spec = TraceSpec {
            lifetimes: Lifetimes::Sized(2.0),
            ..small()
        };
        assert_eq!(spec.validate().unwrap_err().field, "lifetimes");
    }

    #[test]
    fn priority_by_traffic_takes_the_shortest_connections() {
        let spec = TraceSpec {
            flows: 2000,
            packets: 100_000,
            alpha: 1.1,
            priority_traffic: 0.01,
            ..small()
        };
        let g = Generator::new(&spec).unwrap();
        let prio_flows = g.summary().priority_flows;
        let pkts: Vec<GenPacket> = g.collect();
        // per connection: packets and whether it is marked (DSCP 46)
        let mut conns: HashMap<_, (u64, bool)> = HashMap::new();
        for p in &pkts {
            let parsed = wire::parse(&p.frame).unwrap();
            let marked = p.frame[15] >> 2 == spec.priority_dscp;
            let e = conns
                .entry(parsed.tuple.canonical().0)
                .or_insert((0, marked));
            e.0 += 1;
            assert_eq!(e.1, marked, "a connection is in one class");
        }
        let marked: Vec<u64> = conns.values().filter(|c| c.1).map(|c| c.0).collect();
        let rest_min = conns.values().filter(|c| !c.1).map(|c| c.0).min().unwrap();
        let share = marked.iter().sum::<u64>() as f64 / pkts.len() as f64;
        assert_eq!(marked.len() as u32, prio_flows);
        assert!(marked.len() > 10, "{} priority connections", marked.len());
        assert!(
            (0.01..0.0102).contains(&share),
            "priority share of the traffic {share}"
        );
        assert!(
            marked.iter().all(|&m| m <= rest_min),
            "only the shortest are priority"
        );
        let both = TraceSpec {
            priority_share: 0.1,
            ..spec
        };
        assert_eq!(both.validate().unwrap_err().field, "priority_traffic");
    }
}
