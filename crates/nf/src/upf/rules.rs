//! A UPF's sessions as the SMF installs them (TS 29.244 §5.2): packet
//! detection rules (PDRs) that match a packet and name the forwarding
//! (FAR), QoS enforcement (QERs) and usage reporting (URRs) rules applied to
//! it; and the table of every session, indexed by what a packet carries —
//! the local TEID on the uplink (N3), the UE's address on the downlink (N6).
//!
//! The table is immutable once built: PFCP builds a new one for each change
//! and swaps it in whole (`arc_swap`), so the packet path reads it without a
//! lock. What changes on the packet path — a QER's rate state and a URR's
//! strict counts — sits behind `Arc`s that a new table carries over from
//! the old one for the rules that stay.

use core::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::rate::Gcra;
use super::sdf::SdfFilter;

/// Where a packet comes from or goes to (TS 29.244 §8.2.2).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Interface {
    /// The radio side (N3): GTP-U from and to the gNB.
    Access,
    /// The data network (N6): plain IP.
    Core,
}

impl Interface {
    /// From the PFCP value (0 access, 1 core; the others are not served).
    pub fn from_pfcp(v: u8) -> Option<Interface> {
        match v & 0x0f {
            0 => Some(Interface::Access),
            1 => Some(Interface::Core),
            _ => None,
        }
    }

    /// The PFCP value.
    pub fn pfcp(self) -> u8 {
        match self {
            Interface::Access => 0,
            Interface::Core => 1,
        }
    }
}

/// A packet detection rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Pdr {
    /// Its id in the session.
    pub id: u16,
    /// Lower matches first.
    pub precedence: u32,
    /// Where matching packets come from.
    pub source: Interface,
    /// The local TEID an uplink packet must carry (access PDRs).
    pub teid: Option<u32>,
    /// The UE's address: an uplink packet's inner source, a downlink
    /// packet's destination.
    pub ue: Option<Ipv4Addr>,
    /// Service data flow filter, written from the data network towards the
    /// UE (`permit out … from <remote> to assigned`).
    pub sdf: Option<SdfFilter>,
    /// Take the GTP-U/UDP/IPv4 headers off before forwarding.
    pub remove_outer: bool,
    /// The FAR applied to its packets.
    pub far: u32,
    /// QERs applied to its packets.
    pub qers: Vec<u32>,
    /// URRs counting its packets.
    pub urrs: Vec<u32>,
}

/// What a FAR does with a packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send it on.
    Forward,
    /// Drop it.
    Drop,
    /// Hold it (a UE that is idle: paging in progress), up to the buffer's
    /// bound, until the FAR forwards again.
    Buffer,
}

/// A forwarding action rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Far {
    /// Its id in the session.
    pub id: u32,
    /// What it does.
    pub action: Action,
    /// Tunnel the packet to this peer (TEID, address): outer header creation.
    pub tunnel: Option<(u32, Ipv4Addr)>,
}

/// A QoS enforcement rule: a gate and a maximum bit rate per direction.
#[derive(Clone, Debug)]
pub struct Qer {
    /// Its id in the session.
    pub id: u32,
    /// Uplink gate open.
    pub ul_open: bool,
    /// Downlink gate open.
    pub dl_open: bool,
    /// Uplink rate limit (kbit/s), its state shared by every core.
    pub ul: Option<Arc<Gcra>>,
    /// Downlink rate limit (kbit/s).
    pub dl: Option<Arc<Gcra>>,
    /// QoS flow id to mark downlink packets with.
    pub qfi: Option<u8>,
}

/// Volumes counted for a URR.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Volume {
    /// Uplink bytes (inner packets).
    pub ul_bytes: u64,
    /// Downlink bytes.
    pub dl_bytes: u64,
    /// Uplink packets.
    pub ul_packets: u64,
    /// Downlink packets.
    pub dl_packets: u64,
}

impl Volume {
    /// Adds `o`.
    pub fn add(&mut self, o: &Volume) {
        self.ul_bytes += o.ul_bytes;
        self.dl_bytes += o.dl_bytes;
        self.ul_packets += o.ul_packets;
        self.dl_packets += o.dl_packets;
    }

    /// Counts one packet of `bytes` uplink or downlink.
    pub fn count(&mut self, uplink: bool, bytes: u64) {
        if uplink {
            self.ul_bytes += bytes;
            self.ul_packets += 1;
        } else {
            self.dl_bytes += bytes;
            self.dl_packets += 1;
        }
    }
}

/// A URR's counts when every core adds to them on every packet
/// (`accounting = "strict"`).
#[derive(Debug, Default)]
pub struct StrictVolume([AtomicU64; 4]);

impl StrictVolume {
    /// Counts one packet.
    pub fn count(&self, uplink: bool, bytes: u64) {
        let at = if uplink { 0 } else { 2 };
        // Relaxed: independent counters, read only for a report (no
        // ordering with other memory is needed).
        self.0[at].fetch_add(bytes, Ordering::Relaxed);
        self.0[at + 1].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn read(&self) -> Volume {
        let r = |i: usize| self.0[i].load(Ordering::Relaxed);
        Volume {
            ul_bytes: r(0),
            ul_packets: r(1),
            dl_bytes: r(2),
            dl_packets: r(3),
        }
    }
}

/// A usage reporting rule (volume measurement).
#[derive(Clone, Debug)]
pub struct Urr {
    /// Its id in the session.
    pub id: u32,
    /// Its counts under strict accounting.
    pub strict: Arc<StrictVolume>,
    /// Its place in the cores' counts under merged accounting.
    pub slot: Arc<super::slots::Slot>,
}

/// One PFCP session.
#[derive(Clone, Debug)]
pub struct Session {
    /// The UPF's session endpoint id.
    pub seid: u64,
    /// The SMF's session endpoint id (for its messages).
    pub cp_seid: u64,
    /// Uplink PDRs, by precedence.
    pub ul: Vec<Pdr>,
    /// Downlink PDRs, by precedence.
    pub dl: Vec<Pdr>,
    /// FARs.
    pub fars: Vec<Far>,
    /// QERs.
    pub qers: Vec<Qer>,
    /// URRs.
    pub urrs: Vec<Urr>,
}

impl Session {
    /// A session with no rules.
    pub fn new(seid: u64, cp_seid: u64) -> Session {
        Session {
            seid,
            cp_seid,
            ul: Vec::new(),
            dl: Vec::new(),
            fars: Vec::new(),
            qers: Vec::new(),
            urrs: Vec::new(),
        }
    }

    /// Every PDR, both directions.
    pub fn pdrs(&self) -> impl Iterator<Item = &Pdr> {
        self.ul.iter().chain(&self.dl)
    }

    /// Adds or replaces PDR `p` (by id), keeping each direction's order.
    pub fn put_pdr(&mut self, p: Pdr) {
        self.remove_pdr(p.id);
        let list = match p.source {
            Interface::Access => &mut self.ul,
            Interface::Core => &mut self.dl,
        };
        let at = list.partition_point(|q| q.precedence <= p.precedence);
        list.insert(at, p);
    }

    /// Removes PDR `id`; false if there is none.
    pub fn remove_pdr(&mut self, id: u16) -> bool {
        let n = self.ul.len() + self.dl.len();
        self.ul.retain(|p| p.id != id);
        self.dl.retain(|p| p.id != id);
        n != self.ul.len() + self.dl.len()
    }

    /// FAR `id`.
    pub fn far(&self, id: u32) -> Option<&Far> {
        self.fars.iter().find(|f| f.id == id)
    }

    /// QER `id`.
    pub fn qer(&self, id: u32) -> Option<&Qer> {
        self.qers.iter().find(|q| q.id == id)
    }

    /// The index of the first PDR of `list` that matches a packet of the UE (uplink: its
    /// TEID, and the inner packet from the UE to `remote`; downlink: to the
    /// UE from `remote`). `l4` is (protocol, UE's port, remote's port).
    pub fn detect(
        list: &[Pdr],
        teid: Option<u32>,
        ue: Ipv4Addr,
        remote: Ipv4Addr,
        l4: (u8, u16, u16),
    ) -> Option<usize> {
        list.iter().position(|p| {
            (p.teid.is_none() || p.teid == teid)
                && p.ue.is_none_or(|a| a == ue)
                && p.sdf.as_ref().is_none_or(|f| f.matches(remote, ue, l4))
        })
    }

    /// Checks that every rule a PDR names exists.
    pub fn check(&self) -> Result<(), String> {
        for p in self.pdrs() {
            if self.far(p.far).is_none() {
                return Err(format!(
                    "PDR {} names FAR {}, which is not there",
                    p.id, p.far
                ));
            }
            if let Some(q) = p.qers.iter().find(|&&q| self.qer(q).is_none()) {
                return Err(format!("PDR {} names QER {q}, which is not there", p.id));
            }
            if let Some(u) = p
                .urrs
                .iter()
                .find(|&&u| !self.urrs.iter().any(|r| r.id == u))
            {
                return Err(format!("PDR {} names URR {u}, which is not there", p.id));
            }
        }
        Ok(())
    }
}

/// Every session, indexed for the packet path.
#[derive(Clone, Debug, Default)]
pub struct Table {
    /// Sessions by SEID.
    pub sessions: FxHashMap<u64, Arc<Session>>,
    /// Uplink: the session owning a local TEID.
    pub by_teid: FxHashMap<u32, Arc<Session>>,
    /// Downlink: the session owning a UE address.
    pub by_ue: FxHashMap<Ipv4Addr, Arc<Session>>,
    /// Counts the tables built: a core's buffers look again at their
    /// sessions when it changes.
    pub generation: u64,
}

impl Table {
    /// This table with `s` put in (replacing the session of the same SEID),
    /// or an error naming a TEID or UE address another session holds.
    pub fn with(&self, s: Session) -> Result<Table, String> {
        let mut t = self.without(s.seid);
        let s = Arc::new(s);
        for p in s.pdrs() {
            if let Some(teid) = p.teid.filter(|_| p.source == Interface::Access) {
                if t.by_teid.get(&teid).is_some_and(|o| o.seid != s.seid) {
                    return Err(format!("TEID {teid:#x} belongs to another session"));
                }
                t.by_teid.insert(teid, s.clone());
            }
            if let Some(ue) = p.ue.filter(|_| p.source == Interface::Core) {
                if t.by_ue.get(&ue).is_some_and(|o| o.seid != s.seid) {
                    return Err(format!("UE address {ue} belongs to another session"));
                }
                t.by_ue.insert(ue, s.clone());
            }
        }
        t.sessions.insert(s.seid, s);
        Ok(t)
    }

    /// This table without session `seid`.
    pub fn without(&self, seid: u64) -> Table {
        let mut t = self.clone();
        t.generation += 1;
        if t.sessions.remove(&seid).is_some() {
            t.by_teid.retain(|_, s| s.seid != seid);
            t.by_ue.retain(|_, s| s.seid != seid);
        }
        t
    }
}
