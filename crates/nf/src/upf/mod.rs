//! A 5G user plane function (TS 23.501 §6.2.3, TS 29.244; GranularNF §3.3):
//! GTP-U decapsulation of uplink packets from the gNB (N3), encapsulation of
//! downlink packets from the data network (N6), under the rules an SMF
//! installs over PFCP ([`pfcp`]) or the configuration names:
//!
//! - **PDRs** pick a packet's rules: uplink by the local TEID, the inner
//!   source (the UE) and an SDF filter; downlink by the UE's address and an
//!   SDF filter; the lowest precedence that matches wins.
//! - **FARs** forward (taking the tunnel off, putting one on), drop or
//!   buffer: a buffering FAR holds the session's packets (a bounded buffer
//!   per core) until a modification makes it forward, then they leave in the
//!   order they came ([`Nf::take_released`]).
//! - **QERs** close a gate or hold a maximum bit rate (one GCRA per
//!   direction, shared by every core).
//! - **URRs** count volumes: per core and merged on the runtime's merge
//!   period (the delayed merge, GranularNF §4; `accounting = "merged"`), or
//!   with an atomic add per packet on counts every core shares (`strict`),
//!   the comparison of GranularNF Fig. 8 left.
//!
//! The session table is read without a lock: PFCP builds a new table for
//! each change and swaps it in ([`rules::Table`]). The UPF keeps no per-flow
//! state, so any steering serves it; its per-session state is either shared
//! (QERs, strict URRs) or merged (URRs), and buffered packets stay on the
//! core that took them, in order.
//!
//! UE addresses are IPv4; the tunnel is GTP-U over IPv4 (TS 29.281).
//!
//! ```toml
//! [[nf]]
//! kind = "upf"
//! n3 = "192.0.2.1"          # the UPF's GTP-U address
//! pfcp = "127.0.0.1:8805"   # where an SMF reaches it (optional; `flowshift run` listens)
//! [[nf.session]]            # sessions without an SMF (optional)
//! ue = "10.60.0.1"
//! teid = 1                  # uplink TEID the UPF owns
//! gnb = "192.0.2.2"
//! gnb_teid = 1001           # downlink TEID the gNB owns
//! ```

mod buffer;
mod config;
pub mod pfcp;
pub mod rate;
pub mod rules;
pub mod sdf;
pub mod slots;
pub mod usage;

pub use config::{Accounting, UpfSection};

use core::net::Ipv4Addr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustc_hash::FxHashMap;
use wire::gtpu::{self, Gtpu};
use wire::{Ipv4Packet, TcpPacket, UdpPacket};

use crate::{Ctx, DropCause, Nf, NfMeta, NflowKey, Packet, StateKind, Verdict};
use buffer::Buffers;
use rules::{Action, Interface, Pdr, Session, Table, Volume};

counters! {
    /// Counters.
    UpfCounters {
        /// Uplink user packets (G-PDUs to the UPF's address).
        uplink,
        /// Downlink packets (to a UE address).
        downlink,
        /// Packets whose tunnel was taken off.
        decapsulated,
        /// Packets put in a tunnel.
        encapsulated,
        /// Packets taken into a buffering FAR's buffer.
        buffered,
        /// Buffered packets sent when their FAR forwarded again.
        released,
        /// Buffered packets dropped: their session was deleted, or their FAR
        /// now drops.
        discarded,
    }
}

/// Volumes of each (session, URR) counted on one core.
pub type Usage = FxHashMap<(u64, u32), Volume>;

/// What every core's instance shares: the session table and the merged
/// usage.
#[derive(Debug, Default)]
pub struct UpfShared {
    /// The sessions (swapped whole by PFCP).
    pub table: ArcSwap<Table>,
    /// Every core's URR volumes as of the last merge (`merged` accounting):
    /// each core's counts, summed when PFCP reads a URR's.
    pub merged: ArcSwap<Vec<Arc<usage::CoreUsage>>>,
}

impl UpfShared {
    /// The volumes of `seid`'s URR `urr`: the strict counts, or the merged
    /// view's.
    pub fn volume(&self, accounting: Accounting, seid: u64, urr: u32) -> Volume {
        let table = self.table.load();
        let Some(u) = table
            .sessions
            .get(&seid)
            .and_then(|s| s.urrs.iter().find(|u| u.id == urr))
        else {
            return Volume::default();
        };
        match accounting {
            Accounting::Strict => u.strict.read(),
            Accounting::Merged => {
                let mut v = Volume::default();
                for core in self.merged.load().iter() {
                    v.add(&core.volume_at(&u.slot));
                }
                v
            }
        }
    }
}

/// The UPF. See the module documentation.
pub struct Upf {
    meta: NfMeta,
    /// The UPF's GTP-U address.
    n3: Ipv4Addr,
    shared: Arc<UpfShared>,
    accounting: Accounting,
    /// This core's volumes (`merged` accounting).
    usage: usage::CoreUsage,
    buffers: Buffers,
    /// The table generation the buffers were last looked at against.
    seen: u64,
    counters: UpfCounters,
    /// Where its PFCP endpoint listens, and what it needs.
    pfcp: Option<(core::net::SocketAddr, pfcp::Settings)>,
}

/// An inner or plain IPv4 packet's addresses and transport ends.
#[derive(Copy, Clone, Debug)]
struct Ends {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    sport: u16,
    dport: u16,
    len: usize,
}

fn ends(b: &[u8]) -> Option<Ends> {
    let ip = Ipv4Packet::new_checked(b).ok()?;
    let (proto, l4) = (ip.protocol(), ip.payload());
    let (sport, dport) = match proto {
        wire::proto::TCP => TcpPacket::new_checked(l4)
            .map(|t| (t.src_port(), t.dst_port()))
            .unwrap_or((0, 0)),
        wire::proto::UDP => UdpPacket::new_checked(l4)
            .map(|u| (u.src_port(), u.dst_port()))
            .unwrap_or((0, 0)),
        _ => (0, 0),
    };
    Some(Ends {
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        proto,
        sport,
        dport,
        len: usize::from(ip.total_len()),
    })
}

/// What a matched packet is to become.
enum Fate {
    Forward,
    Drop(DropCause),
    Buffer(u32),
}

impl Upf {
    /// A UPF at `n3` with `sessions` installed.
    pub fn new(
        name: impl Into<String>,
        n3: Ipv4Addr,
        accounting: Accounting,
        buffer: usize,
        shared: Arc<UpfShared>,
        pfcp: Option<(core::net::SocketAddr, pfcp::Settings)>,
    ) -> Upf {
        let state = match accounting {
            Accounting::Merged => StateKind::Mergeable,
            Accounting::Strict => StateKind::Stateless,
        };
        Upf {
            meta: NfMeta::new(name, "upf", NflowKey::None, state),
            n3,
            shared,
            accounting,
            usage: usage::CoreUsage::default(),
            buffers: Buffers::new(buffer),
            seen: 0,
            counters: UpfCounters::default(),
            pfcp,
        }
    }

    /// What every core shares (the session table, the merged usage).
    pub fn shared(&self) -> &Arc<UpfShared> {
        &self.shared
    }

    /// Its PFCP endpoint and the address it is to answer on (configured
    /// `pfcp`), for a driver to give a socket (`flowshift run` does).
    pub fn pfcp_endpoint(&self) -> Option<(core::net::SocketAddr, pfcp::Endpoint)> {
        self.pfcp
            .map(|(addr, settings)| (addr, pfcp::Endpoint::new(settings, self.shared.clone())))
    }

    /// This core's volumes (merged accounting), of the sessions installed.
    pub fn usage(&self) -> Usage {
        let table = self.shared.table.load();
        self.usage.by_urr(|seid| table.sessions.contains_key(&seid))
    }

    /// QERs and URRs of `pdr`, then its FAR's decision.
    fn enforce(&mut self, s: &Session, pdr: &Pdr, uplink: bool, bytes: u64, now: u64) -> Fate {
        for q in pdr.qers.iter().filter_map(|&id| s.qer(id)) {
            let (open, mbr) = if uplink {
                (q.ul_open, &q.ul)
            } else {
                (q.dl_open, &q.dl)
            };
            if !open {
                return Fate::Drop(DropCause::UpfGateClosed);
            }
            if mbr.as_ref().is_some_and(|g| !g.allow(now, bytes)) {
                return Fate::Drop(DropCause::UpfRateLimited);
            }
        }
        for &id in &pdr.urrs {
            let Some(u) = s.urrs.iter().find(|u| u.id == id) else {
                continue;
            };
            match self.accounting {
                Accounting::Merged => self.usage.count(&u.slot, s.seid, id, uplink, bytes),
                Accounting::Strict => u.strict.count(uplink, bytes),
            }
        }
        match s.far(pdr.far).map(|f| f.action) {
            Some(Action::Forward) if self.buffers.holds(s.seid, pdr.far) => Fate::Buffer(pdr.far),
            Some(Action::Forward) => Fate::Forward,
            Some(Action::Buffer) => Fate::Buffer(pdr.far),
            Some(Action::Drop) | None => Fate::Drop(DropCause::UpfFarDrop),
        }
    }

    /// Sends `pkt` as `pdr` and its FAR say: the tunnel off and/or on.
    fn forward(&mut self, s: &Session, pdr: &Pdr, pkt: &mut Packet) -> Verdict {
        let l3 = pkt.info.l3_offset as usize;
        if pdr.remove_outer {
            let Ok(g) = Gtpu::parse(pkt.payload()) else {
                return Verdict::Drop(DropCause::UpfMalformed);
            };
            let at = pkt.info.payload_offset as usize;
            if !gtpu::decap(&mut pkt.data, l3, at + g.header_len, at + 8 + g.length) {
                return Verdict::Drop(DropCause::UpfMalformed);
            }
            self.counters.decapsulated += 1;
        }
        if let Some((teid, peer)) = s.far(pdr.far).and_then(|f| f.tunnel) {
            let qfi = pdr.qers.iter().find_map(|&q| s.qer(q).and_then(|q| q.qfi));
            let end = l3 + ends(&pkt.data[l3..]).map_or(0, |e| e.len);
            if end <= l3 || end > pkt.data.len() {
                return Verdict::Drop(DropCause::UpfMalformed);
            }
            let outer = gtpu::Outer {
                src: self.n3,
                dst: peer,
                teid,
                qfi,
            };
            gtpu::encap(&mut pkt.data, l3, end, &outer);
            self.counters.encapsulated += 1;
        }
        match wire::parse(&pkt.data) {
            Ok(info) => {
                pkt.info = info;
                Verdict::Forward
            }
            Err(_) => Verdict::Drop(DropCause::UpfMalformed),
        }
    }

    /// The session and PDR of a packet, and whether it is uplink; or why
    /// none is.
    fn detect(&self, pkt: &Packet) -> Result<(Arc<Session>, usize, bool, u64), DropCause> {
        let l3 = &pkt.data[pkt.info.l3_offset as usize..pkt.info.l3_end as usize];
        let outer = ends(l3).ok_or(DropCause::UpfNoSession)?;
        let table = self.shared.table.load();
        let gtp =
            outer.proto == wire::proto::UDP && outer.dport == gtpu::PORT && outer.dst == self.n3;
        if gtp {
            let g = Gtpu::parse(pkt.payload()).map_err(|_| DropCause::UpfMalformed)?;
            if g.msg_type != gtpu::G_PDU {
                return Err(DropCause::UpfSignalling);
            }
            let at = pkt.info.payload_offset as usize - pkt.info.l3_offset as usize;
            let inner = l3
                .get(at + g.header_len..at + 8 + g.length)
                .and_then(ends)
                .ok_or(DropCause::UpfMalformed)?;
            let s = table.by_teid.get(&g.teid).ok_or(DropCause::UpfNoSession)?;
            let l4 = (inner.proto, inner.sport, inner.dport);
            let i = Session::detect(&s.ul, Some(g.teid), inner.src, inner.dst, l4)
                .ok_or(DropCause::UpfNoSession)?;
            Ok((s.clone(), i, true, inner.len as u64))
        } else {
            let s = table.by_ue.get(&outer.dst).ok_or(DropCause::UpfNoSession)?;
            let l4 = (outer.proto, outer.dport, outer.sport);
            let i = Session::detect(&s.dl, None, outer.dst, outer.src, l4)
                .ok_or(DropCause::UpfNoSession)?;
            Ok((s.clone(), i, false, outer.len as u64))
        }
    }
}

impl Nf for Upf {
    fn meta(&self) -> &NfMeta {
        &self.meta
    }

    fn gtp_steering(&self) -> Option<Ipv4Addr> {
        Some(self.n3)
    }

    fn process(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        let (s, i, uplink, bytes) = match self.detect(pkt) {
            Ok(d) => d,
            Err(c) => return Verdict::Drop(c),
        };
        if uplink {
            self.counters.uplink += 1;
        } else {
            self.counters.downlink += 1;
        }
        let pdr = if uplink { &s.ul[i] } else { &s.dl[i] };
        match self.enforce(&s, pdr, uplink, bytes, cx.now_ns) {
            Fate::Forward => self.forward(&s, pdr, pkt),
            Fate::Drop(c) => Verdict::Drop(c),
            Fate::Buffer(far) => {
                let held = Packet {
                    data: std::mem::take(&mut pkt.data),
                    ..pkt.clone()
                };
                let key = (s.seid, far, pdr.id, uplink);
                if self.buffers.hold(key, held) {
                    self.counters.buffered += 1;
                    Verdict::Drop(DropCause::UpfBuffered)
                } else {
                    Verdict::Drop(DropCause::UpfBufferFull)
                }
            }
        }
    }

    fn take_released(&mut self, out: &mut Vec<Packet>) {
        let table = self.shared.table.load_full();
        if table.generation == self.seen || self.buffers.is_empty() {
            self.seen = table.generation;
            return;
        }
        self.seen = table.generation;
        for ((seid, far, pdr, uplink), pkts) in self.buffers.take_where(|(seid, far, ..)| {
            let action = table
                .sessions
                .get(seid)
                .and_then(|s| s.far(*far))
                .map(|f| f.action);
            action != Some(Action::Buffer)
        }) {
            let s = table.sessions.get(&seid);
            let rule = s.and_then(|s| {
                let list = if uplink { &s.ul } else { &s.dl };
                list.iter().find(|p| p.id == pdr && p.far == far)
            });
            let forwards = s.and_then(|s| s.far(far)).map(|f| f.action) == Some(Action::Forward);
            for mut p in pkts {
                let sent = match (s, rule) {
                    (Some(s), Some(rule)) if forwards => {
                        self.forward(s, rule, &mut p) == Verdict::Forward
                    }
                    _ => false,
                };
                if sent {
                    self.counters.released += 1;
                    out.push(p);
                } else {
                    self.counters.discarded += 1;
                }
            }
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = self.counters.list();
        c.push(("held", self.buffers.len() as u64));
        c
    }

    fn instance(&self) -> Box<dyn Nf> {
        Box::new(Upf {
            meta: self.meta.clone(),
            n3: self.n3,
            shared: self.shared.clone(),
            accounting: self.accounting,
            usage: usage::CoreUsage::default(),
            buffers: Buffers::new(self.buffers.bound()),
            seen: 0,
            counters: UpfCounters::default(),
            pfcp: self.pfcp,
        })
    }

    fn merge_from(&mut self, other: &dyn Nf) {
        if let Some(o) = other.as_any().downcast_ref::<Upf>() {
            self.counters.add(&o.counters);
            self.usage.add(&o.usage);
        }
    }

    fn shares(&self) -> bool {
        self.accounting == Accounting::Merged
    }

    /// Merged accounting: a copy of this core's counts (an array by URR
    /// slot: a copy of memory, no hashing).
    fn share(&mut self) -> Option<crate::Shared> {
        self.shares()
            .then(|| Arc::new(self.usage.clone()) as crate::Shared)
    }

    /// Every core's counts become the view PFCP reports from, summed for a
    /// URR when PFCP reads it ([`UpfShared::volume`]); a deleted session's
    /// URR gives its slot to a later one, whose counts start again from
    /// zero ([`usage`]).
    fn merge_shared(&mut self, all: &[crate::Shared]) {
        if self.accounting != Accounting::Merged {
            return;
        }
        let cores: Vec<Arc<usage::CoreUsage>> = all
            .iter()
            .filter_map(|s| s.clone().downcast::<usage::CoreUsage>().ok())
            .collect();
        self.shared.merged.store(Arc::new(cores));
    }
}

/// Installs a session of one uplink and one downlink PDR (forward both ways,
/// one URR counting both): what `[[nf.session]]` and `flowshift gen --gtp`
/// describe.
pub fn simple_session(seid: u64, ue: Ipv4Addr, teid: u32, gnb: Ipv4Addr, gnb_teid: u32) -> Session {
    let mut s = Session::new(seid, seid);
    s.put_pdr(Pdr {
        id: 1,
        precedence: 100,
        source: Interface::Access,
        teid: Some(teid),
        ue: Some(ue),
        sdf: None,
        remove_outer: true,
        far: 1,
        qers: Vec::new(),
        urrs: vec![1],
    });
    s.put_pdr(Pdr {
        id: 2,
        precedence: 100,
        source: Interface::Core,
        teid: None,
        ue: Some(ue),
        sdf: None,
        remove_outer: false,
        far: 2,
        qers: Vec::new(),
        urrs: vec![1],
    });
    s.fars = vec![
        rules::Far {
            id: 1,
            action: Action::Forward,
            tunnel: None,
        },
        rules::Far {
            id: 2,
            action: Action::Forward,
            tunnel: Some((gnb_teid, gnb)),
        },
    ];
    s.urrs = vec![rules::Urr {
        id: 1,
        strict: Default::default(),
        slot: Default::default(),
    }];
    s
}
