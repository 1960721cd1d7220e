//! NAPT (NAT44), both directions.
//!
//! Outbound connections from the internal prefix get an external address and port
//! from the shard's [`PortPool`]; the port is chosen so that the reply tuple hashes
//! to the **same RSS bucket** as the forward flow, so replies reach the core that
//! holds the mapping with no handoff and no shared pool. The mapping lives in the
//! flow entry's slot; the translated tuple is added as an alias key of the entry,
//! so replies find it with the single lookup. Checksums are updated incrementally
//! (IPv4 header, TCP, UDP — a zero UDP checksum stays zero — and ICMP for echo-id
//! translation). Port exhaustion is a counted drop.
//!
//! A later IPv4 fragment (`L4Info::Fragment`, its ports those of its
//! datagram's first fragment, which came first) has its address rewritten;
//! the first fragment carries the L4 header and its checksum, which covers
//! the whole datagram and is updated incrementally as any packet's.
//!
//! ICMP echo is hashed on addresses only, so the port trick does not apply: the
//! NAT picks an external address whose reply lands in the bucket, and drops
//! (`nat_unsteerable`, counted) when the pool has none. IPv6 passes untranslated.
//!
//! NFLOW key: bidirectional 5-tuple; needs ports in the steering hash.

mod config;
pub mod endpoints;
pub mod events;
pub mod map;
pub mod pool;

use crate::NfMeta;
use core::net::{IpAddr, Ipv4Addr};
use core::time::Duration;
use std::collections::HashMap;
use std::sync::Arc;

pub use config::{Behaviour, NatSection};
pub use events::{EventHub, NatEvent};
use ipnet::Ipv4Net;
pub use map::{NatMap, NatTcp};
pub use pool::{set_port_salt, PortClass, PortPlan, PortPool};
use serde::Deserialize;
use state::Dir;
use steer::nat::{AddressSet, Forward, NatSteering};
use wire::{IcmpPacket, Ipv4Packet, L4Info, TcpPacket, UdpPacket};

use crate::{
    Ctx, DropCause, FlowState, Nf, NflowKey, Packet, ShardInfo, ShardLocal, StateKind, Verdict,
};

/// Per-protocol idle timeouts (RFC 4787 / RFC 5382 recommendations).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatTimeouts {
    /// TCP after the handshake (RFC 5382: at least 2 h 4 min).
    #[serde(with = "crate::fields::duration")]
    pub tcp_established: Duration,
    /// TCP while opening or closing (RFC 5382: 4 min).
    #[serde(with = "crate::fields::duration")]
    pub tcp_transitory: Duration,
    /// UDP (RFC 4787: at least 2 min; 5 min recommended).
    #[serde(with = "crate::fields::duration")]
    pub udp: Duration,
    /// ICMP echo.
    #[serde(with = "crate::fields::duration")]
    pub icmp: Duration,
    /// A mapping whose flow has not been answered yet (TCP or UDP), while its
    /// shard's table is in emergency mode.
    #[serde(with = "crate::fields::duration")]
    pub emergency: Duration,
}

impl Default for NatTimeouts {
    fn default() -> Self {
        NatTimeouts {
            tcp_established: Duration::from_secs(7440),
            tcp_transitory: Duration::from_secs(240),
            udp: Duration::from_secs(300),
            icmp: Duration::from_secs(60),
            emergency: Duration::from_secs(5),
        }
    }
}

counters! {
    /// NAT counters.
    NatCounters {
        /// Mappings created.
        mappings,
        /// Mappings released (expired or evicted).
        released,
        /// Packets translated outbound.
        out,
        /// Packets translated inbound.
        inbound,
        /// Packets passed untranslated (not internal → external, or IPv6).
        passed,
        /// ICMP errors about a mapped flow, translated (RELATED).
        related,
        /// Packets of inside hosts to the NAT's own endpoints sent back
        /// inside (hairpinning).
        hairpinned,
        /// Mappings installed from another node on this NAT's own address
        /// whose port was in use here or not this shard's: two flows may
        /// share it.
        adopt_conflicts,
        /// Mapping events not logged: this core's event queue was full.
        log_lost,
    }
}

struct Shared {
    /// The internal prefix as (network, mask) for membership tests.
    internal: (u32, u32),
    external: Vec<Ipv4Addr>,
    /// `external` as a set, for membership tests.
    ranges: AddressSet,
    ports: (u16, u16),
    /// The timeouts in ns, as the packet path sets them.
    timeouts: TimeoutsNs,
    /// Endpoint-independent mapping.
    eim: bool,
    /// Endpoint-independent filtering.
    eif: bool,
    /// Port forwards.
    forwards: Vec<Forward>,
    /// Each external address's index.
    ext_index: HashMap<Ipv4Addr, u16>,
    /// The forwards by outside endpoint (protocol, address, port): the
    /// address's index and the inside endpoint.
    forwards_out: HashMap<(u8, Ipv4Addr, u16), (u16, Ipv4Addr, u16)>,
    /// The forwards by inside endpoint: the outside one (index, address, port).
    forwards_in: HashMap<(u8, Ipv4Addr, u16), (u16, Ipv4Addr, u16)>,
    /// What the NIC hashes for this NAT, when not the plain 5-tuple.
    steering: Option<Arc<NatSteering>>,
}

/// [`NatTimeouts`] in ns.
struct TimeoutsNs {
    tcp_established: u64,
    tcp_transitory: u64,
    udp: u64,
    icmp: u64,
    emergency: u64,
}

impl TimeoutsNs {
    fn of(t: &NatTimeouts) -> TimeoutsNs {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        TimeoutsNs {
            tcp_established: ns(t.tcp_established),
            tcp_transitory: ns(t.tcp_transitory),
            udp: ns(t.udp),
            icmp: ns(t.icmp),
            emergency: ns(t.emergency),
        }
    }
}

/// The NAT NF.
#[derive(Clone)]
pub struct Nat {
    meta: NfMeta,
    shared: Arc<Shared>,
    plan: Option<Arc<PortPlan>>,
    counters: NatCounters,
    /// Where mapping events go, when logged.
    log: events::EventLog,
}

impl Nat {
    /// A NAT translating `internal` to the addresses `external` (at least one),
    /// with external ports `ports.0..=ports.1`.
    pub fn new(
        name: impl Into<String>,
        internal: Ipv4Net,
        external: Vec<Ipv4Addr>,
        ports: (u16, u16),
        timeouts: NatTimeouts,
    ) -> Nat {
        assert!(
            !external.is_empty(),
            "a NAT needs at least one external address"
        );
        let ranges = AddressSet::new(&external);
        // (the first index of an address listed twice)
        let ext_index = external
            .iter()
            .enumerate()
            .rev()
            .map(|(i, &a)| (a, i as u16))
            .collect();
        Nat {
            meta: NfMeta::new(name, "nat", NflowKey::BiFiveTuple, StateKind::PerFlow)
                .with_ports()
                .with_alias(),
            shared: Arc::new(Shared {
                internal: (u32::from(internal.network()), u32::from(internal.netmask())),
                external,
                ranges,
                ports,
                timeouts: TimeoutsNs::of(&timeouts),
                eim: false,
                eif: false,
                forwards: Vec::new(),
                ext_index,
                forwards_out: HashMap::new(),
                forwards_in: HashMap::new(),
                steering: None,
            }),
            plan: None,
            counters: NatCounters::default(),
            log: events::EventLog::default(),
        }
    }

    /// Sets the mapping and filtering behaviour and the port forwards (of
    /// `external` addresses to `internal` ones, checked by the caller).
    pub fn behave(&mut self, eim: bool, eif: bool, forwards: Vec<Forward>) {
        let sh = Arc::get_mut(&mut self.shared).expect("set before the NAT is shared");
        sh.eim = eim;
        sh.eif = eif && eim;
        for f in &forwards {
            let idx = sh.external.iter().position(|&a| a == f.outside.0);
            let idx = idx.expect("a forward's outside address is the NAT's") as u16;
            sh.forwards_out.insert(
                (f.proto, f.outside.0, f.outside.1),
                (idx, f.inside.0, f.inside.1),
            );
            sh.forwards_in.insert(
                (f.proto, f.inside.0, f.inside.1),
                (idx, f.outside.0, f.outside.1),
            );
        }
        sh.steering = (eim || !forwards.is_empty()).then(|| {
            let (net, mask) = sh.internal;
            Arc::new(NatSteering::new(
                eim,
                (Ipv4Addr::from(net), mask.leading_ones() as u8),
                &sh.external,
                &forwards,
            ))
        });
        sh.forwards = forwards;
    }

    fn plan(&self) -> &Arc<PortPlan> {
        self.plan
            .as_ref()
            .expect("the chain binds the NAT before use")
    }

    /// This core's counters.
    pub fn stats(&self) -> &NatCounters {
        &self.counters
    }

    fn is_external(&self, a: Ipv4Addr) -> bool {
        self.shared.ranges.contains(a)
    }

    fn is_internal(&self, a: Ipv4Addr) -> bool {
        let (net, mask) = self.shared.internal;
        u32::from(a) & mask == net
    }

    /// The idle timeout of a mapping, ns.
    #[inline]
    fn timeout(&self, m: &NatMap, emergency: bool) -> u64 {
        let t = &self.shared.timeouts;
        let normal = match (m.proto, m.tcp) {
            (wire::proto::TCP, NatTcp::Established) => t.tcp_established,
            (wire::proto::TCP, _) => t.tcp_transitory,
            (wire::proto::UDP, _) => t.udp,
            _ => t.icmp,
        };
        if emergency && m.tcp == NatTcp::Opening && m.proto != wire::proto::ICMP {
            return t.emergency.min(normal);
        }
        normal
    }

    /// [`process_hit`](Nf::process_hit) on the flow's slot itself: a packet
    /// of a mapped flow (not an ICMP error) — its mapping's progress, the
    /// rewrite — and the mapping's idle timeout from now; `None`, with
    /// nothing changed, when the packet is not that case. The fused
    /// firewall → NAT loop calls it with the entry's slots borrowed once
    /// ([`Found`](crate::Found)).
    #[inline(always)]
    pub(crate) fn hit_slot(
        &mut self,
        slot: &mut Option<FlowState>,
        emergency: bool,
        pkt: &mut Packet,
    ) -> Option<(Verdict, Option<u64>)> {
        let dir = pkt.dir;
        let Some(FlowState::Nat(m)) = slot else {
            return None;
        };
        if m.flags & NatMap::HAIRPIN != 0 {
            // (two translations and a lookup: `hairpin_hit`)
            return None;
        }
        // (a mapping's packets are IPv4 ones, its TCP and UDP ones go
        // straight to `rewrite_v4`: the kind is known from the match)
        let segment = match pkt.info.l4 {
            L4Info::Tcp { flags } => {
                m.tcp = m.tcp.after(flags, dir);
                true
            }
            // a UDP mapping is answered once a reply came back
            L4Info::Udp => {
                if dir == Dir::Reply && m.tcp == NatTcp::Opening {
                    m.tcp = NatTcp::Established;
                }
                true
            }
            L4Info::IcmpError { .. } => return None,
            _ => false,
        };
        let m = *m;
        let idle = self.timeout(&m, emergency);
        let translate = |pkt: &mut Packet, outbound, addr, port| {
            if segment {
                rewrite_v4(pkt, outbound, addr, port);
            } else {
                rewrite_any(pkt, outbound, addr, port);
            }
        };
        if m.outbound(dir == Dir::Original) {
            translate(pkt, true, m.ext_addr, m.ext_port);
            self.counters.out += 1;
        } else {
            translate(pkt, false, m.int_addr, m.int_port);
            self.counters.inbound += 1;
        }
        Some((Verdict::Forward, Some(idle)))
    }

    /// Chooses an external address and port for a new outbound flow.
    fn map(
        &mut self,
        cx: &mut Ctx<'_>,
        pkt: &Packet,
        src: Ipv4Addr,
        dst: Ipv4Addr,
    ) -> Result<NatMap, DropCause> {
        let t = pkt.info.tuple;
        let mapped = |ext_idx: u16, ext_addr, ext_port, flags| NatMap {
            int_addr: src,
            int_port: t.src_port,
            ext_idx,
            ext_addr,
            ext_port,
            proto: t.proto,
            tcp: NatTcp::Opening,
            flags,
        };
        // a forward's server opening a flow keeps the forward's endpoint
        if let Some(&(e, a, p)) = self.shared.forwards_in.get(&(t.proto, src, t.src_port)) {
            return Ok(mapped(e, a, p, NatMap::STATIC));
        }
        let toeplitz = cx.hasher.toeplitz();
        let mask = self.plan().mask();
        let pool = match cx.local {
            ShardLocal::NatPool(p) => p,
            // an offloading core: `offloadable` keeps new mappings on the owner
            _ => return Err(DropCause::OffloadState),
        };
        let eim = self.shared.eim && matches!(t.proto, wire::proto::TCP | wire::proto::UDP);
        if eim {
            // (`open` holds the mapping for the new flow)
            if let Some((e, p)) = pool.endpoints.outside(t.proto, src, t.src_port) {
                return Ok(mapped(e, self.shared.external[usize::from(e)], p, 0));
            }
        }
        let n = self.shared.external.len();
        let start = (pkt.hash >> 16) as usize % n;
        let icmp = matches!(pkt.info.l4, L4Info::IcmpEcho { .. });
        let class = match t.proto {
            wire::proto::TCP => Some(PortClass::Tcp),
            wire::proto::UDP => Some(PortClass::Udp),
            _ if icmp => None,
            _ => return Err(DropCause::NatUnsupported),
        };
        let mut steerable = false;
        for k in 0..n {
            let e = (start + k) % n;
            let ext = self.shared.external[e].octets();
            // the reply's input: [server, external, server port, external
            // port]; hashed on endpoints, [0, external, 0, external port]
            let partial = if self.shared.eim {
                toeplitz.contribution(4, &ext)
            } else {
                toeplitz.contribution(0, &dst.octets()) ^ toeplitz.contribution(4, &ext)
            };
            let port = match class {
                Some(c) => {
                    let partial = if self.shared.eim {
                        partial
                    } else {
                        partial ^ toeplitz.contribution(8, &t.dst_port.to_be_bytes())
                    };
                    let v = (pkt.hash ^ partial) & mask;
                    pool.alloc(e, c, v)
                }
                None => {
                    if (pkt.hash ^ partial) & mask != 0 {
                        continue;
                    }
                    steerable = true;
                    pool.alloc_icmp(e)
                }
            };
            if let Some(p) = port {
                return Ok(mapped(e as u16, self.shared.external[e], p, 0));
            }
        }
        Err(if icmp && !steerable {
            DropCause::NatUnsteerable
        } else {
            DropCause::NatPortsExhausted
        })
    }
}

/// Translates the packet an ICMPv4 error quotes: its destination (`outbound`:
/// the error leaves the inside about a packet that came in) or its source
/// (inbound: about a packet that went out) becomes `addr:port`, with the
/// quoted IP checksum and, when quoted, the TCP/UDP checksum kept right; then
/// the ICMP checksum over the whole message.
fn rewrite_quote(msg: &mut [u8], outbound: bool, addr: Ipv4Addr, port: u16) {
    use wire::checksum::{update_bytes, update_u16};
    let q = wire::parse::ICMP_ERROR_QUOTE;
    // parse() saw an IPv4 header and the ports here
    let ihl = usize::from(msg[q] & 0x0f) * 4;
    let (a, p) = if outbound {
        (q + 16, q + ihl + 2)
    } else {
        (q + 12, q + ihl)
    };
    let old_addr: [u8; 4] = msg[a..a + 4].try_into().expect("4 bytes");
    let old_port = u16::from_be_bytes([msg[p], msg[p + 1]]);
    let new_addr = addr.octets();
    msg[a..a + 4].copy_from_slice(&new_addr);
    let ck = u16::from_be_bytes([msg[q + 10], msg[q + 11]]);
    let ck = update_bytes(ck, &old_addr, &new_addr);
    msg[q + 10..q + 12].copy_from_slice(&ck.to_be_bytes());
    msg[p..p + 2].copy_from_slice(&port.to_be_bytes());
    // the quoted segment's checksum covers the addresses and the port
    let at = match msg[q + 9] {
        wire::proto::TCP => Some(q + ihl + 16),
        wire::proto::UDP => Some(q + ihl + 6),
        _ => None,
    };
    if let Some(c) = at.filter(|c| c + 2 <= msg.len()) {
        let ck = u16::from_be_bytes([msg[c], msg[c + 1]]);
        if ck != 0 || msg[q + 9] == wire::proto::TCP {
            let ck = update_bytes(ck, &old_addr, &new_addr);
            let ck = update_u16(ck, old_port, port);
            msg[c..c + 2].copy_from_slice(&ck.to_be_bytes());
        }
    }
    IcmpPacket::new_unchecked(msg).fill_checksum_v4();
}

/// Sends a hairpinned packet back by the interface it came in on, to the
/// station it came from (its Ethernet addresses swapped: it now comes from
/// where it was going, the upstream gateway, back to the inside router). A
/// router NF after the NAT addresses it by its routes as any packet.
fn send_back(pkt: &mut Packet) {
    if let Some((dst, rest)) = pkt.data.split_first_chunk_mut::<6>() {
        if let Some(src) = rest.first_chunk_mut::<6>() {
            core::mem::swap(dst, src);
        }
    }
    pkt.hairpin = true;
}

/// Rewrites the inside (outbound: source; inbound: destination) address and
/// port of a packet, with its checksums, and its tuple.
#[inline]
fn rewrite(pkt: &mut Packet, outbound: bool, addr: Ipv4Addr, port: u16) {
    if let (IpAddr::V4(_), L4Info::Tcp { .. } | L4Info::Udp) = (pkt.info.tuple.src, pkt.info.l4) {
        return rewrite_v4(pkt, outbound, addr, port);
    }
    rewrite_any(pkt, outbound, addr, port)
}

/// [`rewrite`] of an IPv4 TCP or UDP packet: the address's checksum delta is
/// computed once and serves the IP header's checksum and, with the port's,
/// the segment's (RFC 1624, one fold each).
#[inline(always)]
fn rewrite_v4(pkt: &mut Packet, outbound: bool, addr: Ipv4Addr, port: u16) {
    let udp = matches!(pkt.info.l4, L4Info::Udp);
    let (l3, l4) = (pkt.info.l3_offset as usize, pkt.info.l4_offset as usize);
    // parse() saw a whole IPv4 header at l3 and a whole TCP or UDP header at
    // l4: one bounds check for each
    let Some((ip, seg)) = pkt
        .data
        .get_mut(l3..)
        .and_then(|d| d.split_at_mut_checked(l4 - l3))
    else {
        return;
    };
    let Some(ip) = ip.first_chunk_mut::<20>() else {
        return;
    };
    let new = addr.octets();
    if udp {
        // UDP's checksum is at 6, TCP's at 16
        if let Some(seg) = seg.first_chunk_mut::<8>() {
            patch::<8, 6>(ip, seg, outbound, new, port, true);
        }
    } else if let Some(seg) = seg.first_chunk_mut::<18>() {
        patch::<18, 16>(ip, seg, outbound, new, port, false);
    }
    set_tuple(pkt, outbound, addr, port);
}

/// Writes the address into the IP header `ip` and the port into the
/// segment's header `seg` (its checksum at `C`), with both checksums.
#[inline(always)]
fn patch<const N: usize, const C: usize>(
    ip: &mut [u8; 20],
    seg: &mut [u8; N],
    outbound: bool,
    new: [u8; 4],
    port: u16,
    udp: bool,
) {
    // (the one's-complement sum is the same in either byte order, RFC 1071
    // §2(B): words are read and written in the machine's, with no swaps)
    let (a, p) = if outbound { (12, 0) } else { (16, 2) };
    let w = |d: &[u8], i: usize| u32::from(u16::from_ne_bytes([d[i], d[i + 1]]));
    let port_ne = u16::from_ne_bytes(port.to_be_bytes());
    let delta = (0xffff ^ w(ip, a))
        + (0xffff ^ w(ip, a + 2))
        + u32::from(u16::from_ne_bytes([new[0], new[1]]))
        + u32::from(u16::from_ne_bytes([new[2], new[3]]));
    let ipck = !fold32((0xffff ^ w(ip, 10)) + delta);
    ip[10..12].copy_from_slice(&ipck.to_ne_bytes());
    ip[a..a + 4].copy_from_slice(&new);
    let old_port = w(seg, p);
    seg[p..p + 2].copy_from_slice(&port_ne.to_ne_bytes());
    let ck = w(seg, C);
    if !(udp && ck == 0) {
        let l4ck = !fold32((0xffff ^ ck) + delta + (0xffff ^ old_port) + u32::from(port_ne));
        // (a UDP checksum of 0 means none: 0 is sent as 0xffff)
        let l4ck = if udp && l4ck == 0 { 0xffff } else { l4ck };
        seg[C..C + 2].copy_from_slice(&l4ck.to_ne_bytes());
    }
}

/// The one's-complement fold of a sum of at most 2¹⁶ 16-bit words.
#[inline(always)]
fn fold32(x: u32) -> u16 {
    let x = (x & 0xffff) + (x >> 16);
    ((x & 0xffff) + (x >> 16)) as u16
}

/// The tuple after a rewrite of a TCP or UDP packet.
#[inline]
fn set_tuple(pkt: &mut Packet, outbound: bool, addr: Ipv4Addr, port: u16) {
    let t = &mut pkt.info.tuple;
    if outbound {
        t.src = IpAddr::V4(addr);
        t.src_port = port;
    } else {
        t.dst = IpAddr::V4(addr);
        t.dst_port = port;
    }
}

#[cold]
#[inline(never)]
fn rewrite_any(pkt: &mut Packet, outbound: bool, addr: Ipv4Addr, port: u16) {
    let old = pkt.info.tuple;
    let (old_addr, new_addr) = if outbound {
        (old.src, IpAddr::V4(addr))
    } else {
        (old.dst, IpAddr::V4(addr))
    };
    {
        let mut ip = Ipv4Packet::new_unchecked(pkt.l3_mut());
        if outbound {
            ip.rewrite_src_addr(addr);
        } else {
            ip.rewrite_dst_addr(addr);
        }
    }
    match pkt.info.l4 {
        L4Info::Tcp { .. } => {
            let mut tcp = TcpPacket::new_unchecked(pkt.l4_mut());
            tcp.update_checksum_for_addr(old_addr, new_addr);
            if outbound {
                tcp.rewrite_src_port(port);
            } else {
                tcp.rewrite_dst_port(port);
            }
        }
        L4Info::Udp => {
            let mut udp = UdpPacket::new_unchecked(pkt.l4_mut());
            udp.update_checksum_for_addr(old_addr, new_addr);
            if outbound {
                udp.rewrite_src_port(port);
            } else {
                udp.rewrite_dst_port(port);
            }
        }
        L4Info::IcmpEcho { .. } => IcmpPacket::new_unchecked(pkt.l4_mut()).rewrite_echo_id(port),
        L4Info::IcmpError { .. } => rewrite_quote(pkt.l4_mut(), outbound, addr, port),
        _ => {}
    }
    let t = &mut pkt.info.tuple;
    let echo = matches!(pkt.info.l4, L4Info::IcmpEcho { .. });
    if outbound {
        t.src = new_addr;
        t.src_port = port;
        if echo {
            t.dst_port = port;
        }
    } else {
        t.dst = new_addr;
        t.dst_port = port;
        if echo {
            t.src_port = port;
        }
    }
}

impl Nf for Nat {
    fn meta(&self) -> &NfMeta {
        &self.meta
    }

    /// A flow with its mapping needs only its slot; a new mapping needs the pool.
    fn offloadable(&self, slot: Option<&FlowState>) -> bool {
        slot.is_some()
    }

    fn bind(&mut self, hasher: &steer::RssHasher, bucket_mask: u32) {
        self.plan = Some(PortPlan::bound(hasher, bucket_mask, self.shared.ports));
    }

    fn nat_steering(&self) -> Option<Arc<NatSteering>> {
        self.shared.steering.clone()
    }

    fn shard_local(&self, shard: &ShardInfo) -> ShardLocal {
        let mut pool = PortPool::new(
            self.plan().clone(),
            shard.index,
            shard.count,
            self.shared.external.len(),
        );
        // a forward's outside port is never handed out (it is reserved in
        // the shard that owns it)
        for f in &self.shared.forwards {
            let e = self.shared.forwards_out[&(f.proto, f.outside.0, f.outside.1)].0;
            let class = match f.proto {
                wire::proto::TCP => PortClass::Tcp,
                _ => PortClass::Udp,
            };
            pool.reserve(usize::from(e), class, f.outside.1);
        }
        ShardLocal::NatPool(pool)
    }

    fn process(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        if let L4Info::IcmpError { .. } = pkt.info.l4 {
            return self.icmp_error(cx, pkt);
        }
        match self.process_hit(cx, pkt) {
            Some(v) => v,
            None => self.new_flow(cx, pkt),
        }
    }

    /// A packet of a mapped flow (not an ICMP error): its mapping's progress
    /// and timeout, and the rewrite.
    #[inline(always)]
    fn process_hit(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Option<Verdict> {
        let emergency = cx.emergency;
        let hit = self.hit_slot(cx.slot(), emergency, pkt);
        cx.hit_done(hit)
    }

    fn adopt(&mut self, local: &mut ShardLocal, state: &FlowState) {
        if let (ShardLocal::NatPool(pool), FlowState::Nat(m)) = (local, state) {
            let e = usize::from(m.ext_idx);
            if self.shared.external.get(e) != Some(&m.ext_addr) || m.flags & NatMap::STATIC != 0 {
                // another node's address: its port is that node's; a
                // forward's port is no pool's
                return;
            }
            if self.holds_endpoint(m)
                && !pool
                    .endpoints
                    .hold(m.proto, (m.int_addr, m.int_port), (m.ext_idx, m.ext_port))
            {
                // its mapping's port was taken by an earlier flow
                return;
            }
            let taken = match m.proto {
                wire::proto::TCP => pool.reserve(e, PortClass::Tcp, m.ext_port),
                wire::proto::UDP => pool.reserve(e, PortClass::Udp, m.ext_port),
                _ => pool.reserve_icmp(e, m.ext_port),
            };
            if !taken {
                self.counters.adopt_conflicts += 1;
            }
        }
    }

    fn release(&mut self, local: &mut ShardLocal, state: FlowState) {
        if let (ShardLocal::NatPool(pool), FlowState::Nat(m)) = (local, state) {
            self.log(&m, false);
            let e = usize::from(m.ext_idx);
            if self.shared.external.get(e) != Some(&m.ext_addr) || m.flags & NatMap::STATIC != 0 {
                // installed from another node: its port is that node's; a
                // forward's port is no pool's
                self.counters.released += 1;
                return;
            }
            if self.holds_endpoint(&m)
                && pool.endpoints.release(m.proto, m.int_addr, m.int_port) == Some(false)
            {
                // other flows still hold the mapping
                self.counters.released += 1;
                return;
            }
            match m.proto {
                wire::proto::TCP => pool.free(e, PortClass::Tcp, m.ext_port),
                wire::proto::UDP => pool.free(e, PortClass::Udp, m.ext_port),
                _ => pool.free_icmp(e, m.ext_port),
            }
            self.counters.released += 1;
        }
    }

    /// Timeouts, and addresses added at the end of `external`, change live
    /// (as do `internal` without endpoint hashing); mappings keep theirs.
    fn reload(&mut self, new: &dyn Nf) -> Result<(), String> {
        let n = new.as_any().downcast_ref::<Nat>().ok_or("not a NAT")?;
        let (a, b) = (&*self.shared, &*n.shared);
        if a.ports != b.ports {
            return Err("`ports` cannot change live (each shard owns its share of them)".into());
        }
        if (a.eim, a.eif, &a.forwards) != (b.eim, b.eif, &b.forwards) {
            return Err(
                "`mapping`, `filtering` and `forwards` cannot change live (the NIC hashes by them)"
                    .into(),
            );
        }
        if a.internal != b.internal && a.steering.is_some() {
            return Err("`internal` cannot change live with endpoint hashing".into());
        }
        if !b.external.starts_with(&a.external) {
            return Err(
                "addresses may be added at the end of `external`; removing or reordering \
                 them needs a restart (mappings hold their place)"
                    .into(),
            );
        }
        // (the steering the NIC hashes by is the one of `a`, equal)
        let steering = a.steering.clone();
        self.shared = Arc::new(Shared {
            internal: b.internal,
            external: b.external.clone(),
            ranges: b.ranges.clone(),
            ports: b.ports,
            timeouts: TimeoutsNs { ..b.timeouts },
            eim: b.eim,
            eif: b.eif,
            forwards: b.forwards.clone(),
            ext_index: b.ext_index.clone(),
            forwards_out: b.forwards_out.clone(),
            forwards_in: b.forwards_in.clone(),
            steering,
        });
        Ok(())
    }

    fn log_events(&mut self, hub: &Arc<EventHub>) {
        self.log = events::EventLog::to(hub.clone());
    }

    counted_nf!(Nat);
}

impl Nat {
    /// An ICMP error about a mapped flow is translated like the flow's own
    /// packets (outer address and the quoted packet), the mapping untouched;
    /// about no mapping, the packet is what a new flow's would be.
    #[cold]
    #[inline(never)]
    fn icmp_error(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        let Some(FlowState::Nat(m)) = cx.get() else {
            return self.new_flow(cx, pkt);
        };
        let m = *m;
        if m.flags & NatMap::HAIRPIN != 0 {
            // (not translated: both ends of the quote would change)
            return Verdict::Drop(DropCause::NatNoMapping);
        }
        if m.outbound(pkt.dir == Dir::Original) {
            rewrite(pkt, true, m.ext_addr, m.ext_port);
        } else {
            rewrite(pkt, false, m.int_addr, m.int_port);
        }
        self.counters.related += 1;
        Verdict::Forward
    }

    /// Whether a flow's mapping is held in its shard's endpoint table.
    fn holds_endpoint(&self, m: &NatMap) -> bool {
        self.shared.eim
            && m.flags & (NatMap::STATIC | NatMap::HAIRPIN) == 0
            && matches!(m.proto, wire::proto::TCP | wire::proto::UDP)
    }

    /// A packet to one of the NAT's addresses that no flow knows: a
    /// flow to a port forward's server, or with endpoint-independent
    /// filtering to the inside endpoint of a mapping; else no mapping.
    #[cold]
    #[inline(never)]
    fn inbound(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet, dst: Ipv4Addr) -> Verdict {
        let t = pkt.info.tuple;
        // (a fragment or an ICMP error opens nothing)
        if pkt.dir == Dir::Reply || !matches!(pkt.info.l4, L4Info::Tcp { .. } | L4Info::Udp) {
            return Verdict::Drop(DropCause::NatNoMapping);
        }
        let sh = &self.shared;
        let (m, held) = if let Some(&(e, a, p)) = sh.forwards_out.get(&(t.proto, dst, t.dst_port)) {
            ((e, a, p), NatMap::INBOUND | NatMap::STATIC)
        } else if sh.eif {
            let (ShardLocal::NatPool(pool), Some(&e)) = (&*cx.local, sh.ext_index.get(&dst)) else {
                return Verdict::Drop(DropCause::NatNoMapping);
            };
            match pool.endpoints.inside(t.proto, e, t.dst_port) {
                Some((a, p)) => ((e, a, p), NatMap::INBOUND),
                None => return Verdict::Drop(DropCause::NatNoMapping),
            }
        } else {
            return Verdict::Drop(DropCause::NatNoMapping);
        };
        let IpAddr::V4(src) = t.src else {
            return Verdict::Drop(DropCause::NatNoMapping);
        };
        if self.is_internal(src) {
            return self.hairpin(cx, pkt, src, (m.1, m.2));
        }
        let m = NatMap {
            int_addr: m.1,
            int_port: m.2,
            ext_idx: m.0,
            ext_addr: dst,
            ext_port: t.dst_port,
            proto: t.proto,
            tcp: NatTcp::Opening,
            flags: held,
        };
        rewrite(pkt, false, m.int_addr, m.int_port);
        let v = self.open(cx, pkt, m);
        self.counters.inbound += u64::from(v == Verdict::Forward);
        v
    }

    /// A new flow's mapping `m`, its packet `pkt` translated: the translated
    /// tuple becomes a second key of the flow's entry (refused only on an
    /// offloading core, which maps nothing), the mapping its state (and its
    /// endpoint's, held one flow more), logged and counted.
    fn open(&mut self, cx: &mut Ctx<'_>, pkt: &Packet, m: NatMap) -> Verdict {
        if !cx.alias_rewritten(pkt) {
            return Verdict::Drop(DropCause::OffloadState);
        }
        if self.holds_endpoint(&m) {
            if let ShardLocal::NatPool(pool) = cx.local {
                pool.endpoints
                    .hold(m.proto, (m.int_addr, m.int_port), (m.ext_idx, m.ext_port));
            }
        }
        cx.insert(FlowState::Nat(m));
        cx.set_timeout(self.timeout(&m, cx.emergency));
        self.log(&m, true);
        self.counters.mappings += 1;
        Verdict::Forward
    }

    /// A new flow from inside host `src` to one of the NAT's endpoints,
    /// whose inside endpoint is `target`: its source gets an outside port
    /// whose hash lands in this packet's bucket (the NIC hashed it on its
    /// destination endpoint, and hashes the answers on theirs, `steer::nat`),
    /// and it goes back inside to the target.
    #[cold]
    #[inline(never)]
    fn hairpin(
        &mut self,
        cx: &mut Ctx<'_>,
        pkt: &mut Packet,
        src: Ipv4Addr,
        target: (Ipv4Addr, u16),
    ) -> Verdict {
        let t = pkt.info.tuple;
        let class = match t.proto {
            wire::proto::TCP => PortClass::Tcp,
            _ => PortClass::Udp,
        };
        let toeplitz = cx.hasher.toeplitz();
        let mask = self.plan().mask();
        let ShardLocal::NatPool(pool) = &mut *cx.local else {
            return Verdict::Drop(DropCause::OffloadState);
        };
        let n = self.shared.external.len();
        let start = (pkt.hash >> 16) as usize % n;
        let Some((e, p)) = (0..n).find_map(|k| {
            let e = (start + k) % n;
            let ext = self.shared.external[e].octets();
            let v = (pkt.hash ^ toeplitz.contribution(4, &ext)) & mask;
            Some((e, pool.alloc(e, class, v)?))
        }) else {
            return Verdict::Drop(DropCause::NatPortsExhausted);
        };
        let m = NatMap {
            int_addr: src,
            int_port: t.src_port,
            ext_idx: e as u16,
            ext_addr: self.shared.external[e],
            ext_port: p,
            proto: t.proto,
            tcp: NatTcp::Opening,
            flags: NatMap::HAIRPIN,
        };
        rewrite(pkt, true, m.ext_addr, m.ext_port);
        rewrite(pkt, false, target.0, target.1);
        send_back(pkt);
        let v = self.open(cx, pkt, m);
        self.counters.hairpinned += u64::from(v == Verdict::Forward);
        v
    }

    /// A packet of a hairpinned flow (`m`): both its endpoints
    /// translated, the target's looked up again (a forward, or a mapping
    /// that may have ended).
    #[cold]
    #[inline(never)]
    fn hairpin_hit(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet, mut m: NatMap) -> Verdict {
        let t = pkt.info.tuple;
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (t.src, t.dst) else {
            return Verdict::Drop(DropCause::NatNoMapping);
        };
        let sh = &self.shared;
        let endpoints = match &*cx.local {
            ShardLocal::NatPool(pool) => Some(&pool.endpoints),
            _ => None,
        };
        if pkt.dir == Dir::Original {
            // inside host → the target's outside endpoint
            let target = sh
                .forwards_out
                .get(&(t.proto, dst, t.dst_port))
                .map(|&(_, a, p)| (a, p))
                .or_else(|| {
                    let e = *sh.ext_index.get(&dst)?;
                    endpoints?.inside(t.proto, e, t.dst_port).filter(|_| sh.eif)
                });
            let Some((a, p)) = target else {
                return Verdict::Drop(DropCause::NatNoMapping);
            };
            rewrite(pkt, true, m.ext_addr, m.ext_port);
            rewrite(pkt, false, a, p);
        } else {
            // the target → the inside host's outside endpoint
            let target = sh
                .forwards_in
                .get(&(t.proto, src, t.src_port))
                .map(|&(_, a, p)| (a, p))
                .or_else(|| {
                    let (e, p) = endpoints?.outside(t.proto, src, t.src_port)?;
                    Some((sh.external[usize::from(e)], p)).filter(|_| sh.eif)
                });
            let Some((a, p)) = target else {
                return Verdict::Drop(DropCause::NatNoMapping);
            };
            rewrite(pkt, true, a, p);
            rewrite(pkt, false, m.int_addr, m.int_port);
        }
        send_back(pkt);
        match pkt.info.l4 {
            L4Info::Tcp { flags } => m.tcp = m.tcp.after(flags, pkt.dir),
            _ if pkt.dir == Dir::Reply && m.tcp == NatTcp::Opening => m.tcp = NatTcp::Established,
            _ => {}
        }
        cx.insert(FlowState::Nat(m));
        cx.set_timeout(self.timeout(&m, cx.emergency));
        self.counters.hairpinned += 1;
        Verdict::Forward
    }

    /// Records a mapping's creation or end (counted when the queue is full).
    #[inline]
    fn log(&mut self, m: &NatMap, created: bool) {
        let e = NatEvent {
            created,
            proto: m.proto,
            int: (m.int_addr, m.int_port),
            ext: (m.ext_addr, m.ext_port),
        };
        if !self.log.record(e) {
            self.counters.log_lost += 1;
        }
    }

    /// A packet of a flow with no mapping: passed, refused, or mapped.
    #[inline(never)]
    fn new_flow(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        if let Some(FlowState::Nat(m)) = cx.get() {
            if m.flags & NatMap::HAIRPIN != 0 {
                let m = *m;
                return self.hairpin_hit(cx, pkt, m);
            }
        }
        let t = pkt.info.tuple;
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (t.src, t.dst) else {
            self.counters.passed += 1;
            return Verdict::Forward;
        };
        if self.is_external(dst) {
            return self.inbound(cx, pkt, dst);
        }
        if pkt.dir == Dir::Reply || !self.is_internal(src) || self.is_internal(dst) {
            self.counters.passed += 1;
            return Verdict::Forward;
        }
        if let L4Info::IcmpError { .. } | L4Info::Fragment = pkt.info.l4 {
            // an error about a flow the NAT never mapped opens nothing, nor
            // does a fragment whose first fragment was not mapped
            return Verdict::Drop(DropCause::NatNoMapping);
        }
        let m = match self.map(cx, pkt, src, dst) {
            Ok(m) => m,
            Err(c) => return Verdict::Drop(c),
        };
        rewrite(pkt, true, m.ext_addr, m.ext_port);
        let v = self.open(cx, pkt, m);
        self.counters.out += u64::from(v == Verdict::Forward);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, L4Repr, PacketRepr, TcpRepr};
    use wire::TcpFlags;

    fn packet(udp: bool, x: u64) -> Packet {
        let l4 = if udp {
            L4Repr::Udp {
                src_port: x as u16,
                dst_port: (x >> 16) as u16,
            }
        } else {
            L4Repr::Tcp(TcpRepr {
                src_port: x as u16,
                dst_port: (x >> 16) as u16,
                seq: (x >> 8) as u32,
                ack: (x >> 24) as u32,
                flags: TcpFlags::ACK,
                window: 512,
                urgent: 0,
                options: vec![],
            })
        };
        let frame = PacketRepr {
            eth: EthernetRepr {
                src: [2, 0, 0, 0, 0, 1],
                dst: [2, 0, 0, 0, 0, 2],
                vlan: None,
            },
            ip: IpRepr::V4(Ipv4Repr {
                src: Ipv4Addr::from((x >> 32) as u32),
                dst: Ipv4Addr::from((x as u32).rotate_left(7)),
                dscp: 0,
                ecn: 0,
                ident: x as u16,
                dont_frag: true,
                ttl: 64,
                options: vec![],
            }),
            l4,
            payload: (x as u32).to_be_bytes()[..(x % 5) as usize].to_vec(),
        }
        .to_bytes();
        Packet::new(
            frame,
            0,
            &steer::RssHasher::new(steer::RssKey::DEFAULT, steer::HashFields::IpPorts),
        )
        .unwrap()
    }

    #[test]
    fn external_and_internal_membership_is_the_lists() {
        let a = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        // unordered, a duplicate, gaps, and a run at the top of the space
        let external = [
            "198.51.100.7",
            "198.51.100.5",
            "198.51.100.4",
            "198.51.100.5",
            "9.9.9.9",
            "255.255.255.254",
            "255.255.255.255",
        ]
        .map(a)
        .to_vec();
        let nat = Nat::new(
            "nat",
            "10.1.0.0/16".parse().unwrap(),
            external.clone(),
            (1024, 65535),
            NatTimeouts::default(),
        );
        for x in [
            "0.0.0.0",
            "9.9.9.8",
            "9.9.9.10",
            "198.51.100.3",
            "198.51.100.6",
            "198.51.100.8",
            "255.255.255.253",
        ] {
            assert!(!nat.is_external(a(x)), "{x}");
        }
        for x in &external {
            assert!(nat.is_external(*x), "{x}");
        }
        assert!(nat.is_internal(a("10.1.0.0")) && nat.is_internal(a("10.1.255.255")));
        assert!(!nat.is_internal(a("10.0.255.255")) && !nat.is_internal(a("10.2.0.0")));
    }

    #[test]
    fn the_fused_ipv4_rewrite_writes_what_the_generic_one_does() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..4000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let udp = i % 2 == 1;
            let outbound = i % 4 < 2;
            let (addr, port) = (Ipv4Addr::from((x >> 11) as u32), (x >> 40) as u16);
            let mut a = packet(udp, x);
            if udp && i % 8 == 1 {
                // a UDP checksum of 0 ("none") stays 0
                let c = a.info.l4_offset as usize + 6;
                a.data[c..c + 2].copy_from_slice(&[0, 0]);
            }
            let mut b = a.clone();
            rewrite_v4(&mut a, outbound, addr, port);
            rewrite_any(&mut b, outbound, addr, port);
            assert_eq!(a.data, b.data, "packet {i}");
            assert_eq!(a.info.tuple, b.info.tuple);
        }
    }
}
