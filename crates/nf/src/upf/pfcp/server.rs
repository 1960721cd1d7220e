//! The UPF's PFCP endpoint (N4): answers an SMF's heartbeats, association
//! setup, and session establishment, modification and deletion, by building
//! a new session table for each change and swapping it in. The packet path
//! never waits for it. Pure: datagrams in, datagrams out; a driver gives it
//! a socket (`netio::responder`, started by `flowshift run`).

use core::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::codec::{apply, Refusal};
use super::ie::{self, ty, Writer};
use super::msg::{cause, emit, kind, Header, Message};
use crate::upf::rules::{Session, Table};
use crate::upf::{Accounting, UpfShared};

/// What the endpoint needs to know of its UPF.
#[derive(Copy, Clone, Debug)]
pub struct Settings {
    /// PFCP node id.
    pub node_id: Ipv4Addr,
    /// The GTP-U address given in F-TEIDs the UPF chooses.
    pub n3: Ipv4Addr,
    /// How URR volumes are read for reports.
    pub accounting: Accounting,
    /// Bytes a QER's rate lets through at once.
    pub qer_burst: u64,
}

/// Counts of what the endpoint did.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Requests answered.
    pub requests: AtomicU64,
    /// Requests answered with a cause other than "accepted".
    pub refused: AtomicU64,
    /// Datagrams that were not PFCP (not answered).
    pub malformed: AtomicU64,
}

/// Seconds since 1900 (NTP), as Recovery Time Stamps are.
fn ntp_now() -> u32 {
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    (unix + 2_208_988_800) as u32
}

/// What answers PFCP requests, without a socket: the server's logic, which
/// a test or a fuzzer drives with datagrams directly.
pub struct Endpoint {
    settings: Settings,
    shared: Arc<UpfShared>,
    /// SMFs that set up an association.
    peers: FxHashSet<core::net::IpAddr>,
    next_seid: u64,
    next_teid: u32,
    recovery: u32,
    /// What it did.
    pub stats: Arc<ServerStats>,
}

impl Endpoint {
    /// An endpoint for the UPF whose state `shared` is.
    pub fn new(settings: Settings, shared: Arc<UpfShared>) -> Endpoint {
        Endpoint {
            settings,
            shared,
            peers: FxHashSet::default(),
            next_seid: 1 << 32,
            next_teid: 1 << 24,
            recovery: ntp_now(),
            stats: Arc::default(),
        }
    }

    /// The response to the datagram `b` from `from`; none for bytes that
    /// are not a PFCP message (counted).
    pub fn answer(&mut self, b: &[u8], from: SocketAddr) -> Option<Vec<u8>> {
        let Ok(m) = Message::parse(b) else {
            self.stats.malformed.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let (reply_kind, seid, body) = match m.header.kind {
            kind::HEARTBEAT_REQUEST => {
                let mut w = Writer::default();
                w.ie(ty::RECOVERY_TIME_STAMP, &self.recovery.to_be_bytes());
                (kind::HEARTBEAT_RESPONSE, None, w.out)
            }
            kind::ASSOCIATION_SETUP_REQUEST => {
                let ok = m.ies().find(ty::NODE_ID).ok().flatten().is_some();
                if ok {
                    self.peers.insert(from.ip());
                }
                let mut w = Writer::default();
                w.node_id(self.settings.node_id)
                    .cause(if ok {
                        cause::ACCEPTED
                    } else {
                        cause::MANDATORY_IE_MISSING
                    })
                    .ie(ty::RECOVERY_TIME_STAMP, &self.recovery.to_be_bytes());
                (kind::ASSOCIATION_SETUP_RESPONSE, None, w.out)
            }
            kind::SESSION_ESTABLISHMENT_REQUEST => {
                let (seid, w) = self.establish(&m, from);
                (kind::SESSION_ESTABLISHMENT_RESPONSE, Some(seid), w.out)
            }
            kind::SESSION_MODIFICATION_REQUEST => {
                let (seid, w) = self.modify(&m);
                (kind::SESSION_MODIFICATION_RESPONSE, Some(seid), w.out)
            }
            kind::SESSION_DELETION_REQUEST => {
                let (seid, w) = self.delete(&m);
                (kind::SESSION_DELETION_RESPONSE, Some(seid), w.out)
            }
            other => {
                // a request this UPF does not serve: its response type is
                // the next one, with the cause that says so
                let mut w = Writer::default();
                w.cause(cause::SERVICE_NOT_SUPPORTED);
                (other.wrapping_add(1), m.header.seid, w.out)
            }
        };
        if ie::Ies(&body)
            .find(ty::CAUSE)
            .ok()
            .flatten()
            .is_some_and(|c| c.value != [cause::ACCEPTED])
        {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
        }
        let header = Header {
            kind: reply_kind,
            seid,
            seq: m.header.seq,
        };
        Some(emit(&header, &body))
    }

    fn refusal(&self, (c, why): Refusal) -> Writer {
        let _ = why;
        let mut w = Writer::default();
        w.node_id(self.settings.node_id).cause(c);
        w
    }

    fn choose_teid(&mut self, table: &Table) -> u32 {
        loop {
            self.next_teid = self.next_teid.wrapping_add(1).max(1);
            if !table.by_teid.contains_key(&self.next_teid) {
                return self.next_teid;
            }
        }
    }

    fn establish(&mut self, m: &Message<'_>, from: SocketAddr) -> (u64, Writer) {
        let cp = match m
            .ies()
            .need(ty::F_SEID, "CP F-SEID")
            .and_then(|ie| ie::f_seid(&ie))
        {
            Ok(s) => s,
            Err(e) => return (0, self.refusal((cause::MANDATORY_IE_MISSING, e.0))),
        };
        if !self.peers.contains(&from.ip()) {
            return (
                cp,
                self.refusal((cause::NO_ASSOCIATION, "no association".into())),
            );
        }
        self.next_seid += 1;
        let seid = self.next_seid;
        let table = self.shared.table.load_full();
        let mut s = Session::new(seid, cp);
        let mut taken = Vec::new();
        let burst = self.settings.qer_burst;
        let chosen = {
            let mut choose = || {
                let t = loop {
                    let t = self.choose_teid(&table);
                    if !taken.contains(&t) {
                        break t;
                    }
                };
                taken.push(t);
                t
            };
            apply(&mut s, m.ies(), burst, &mut choose)
        };
        let chosen = match chosen.and_then(|c| {
            let t = table.with(s).map_err(|e| (cause::RULE_FAILURE, e))?;
            Ok((c, t))
        }) {
            Ok((c, t)) => {
                self.shared.table.store(Arc::new(t));
                c
            }
            Err(r) => return (cp, self.refusal(r)),
        };
        let mut w = Writer::default();
        w.node_id(self.settings.node_id)
            .cause(cause::ACCEPTED)
            .f_seid(seid, self.settings.node_id);
        self.created(&mut w, &chosen);
        (cp, w)
    }

    fn created(&self, w: &mut Writer, chosen: &[(u16, u32)]) {
        for (pdr, teid) in chosen {
            w.group(ty::CREATED_PDR, |w| {
                w.ie(ty::PDR_ID, &pdr.to_be_bytes());
                let mut v = vec![0x01];
                v.extend_from_slice(&teid.to_be_bytes());
                v.extend_from_slice(&self.settings.n3.octets());
                w.ie(ty::F_TEID, &v);
            });
        }
    }

    fn modify(&mut self, m: &Message<'_>) -> (u64, Writer) {
        let table = self.shared.table.load_full();
        let Some(old) = m.header.seid.and_then(|s| table.sessions.get(&s)) else {
            return (
                0,
                self.refusal((cause::SESSION_NOT_FOUND, "no such session".into())),
            );
        };
        let cp = old.cp_seid;
        let mut s = Session::clone(old);
        let mut choose = {
            let mut next = self.next_teid;
            let table = table.clone();
            move || loop {
                next = next.wrapping_add(1).max(1);
                if !table.by_teid.contains_key(&next) {
                    return next;
                }
            }
        };
        let r = apply(&mut s, m.ies(), self.settings.qer_burst, &mut choose).and_then(|c| {
            let t = table.with(s).map_err(|e| (cause::RULE_FAILURE, e))?;
            Ok((c, t))
        });
        match r {
            Ok((chosen, t)) => {
                if let Some(&(_, last)) = chosen.iter().max_by_key(|c| c.1) {
                    self.next_teid = self.next_teid.max(last);
                }
                self.shared.table.store(Arc::new(t));
                let mut w = Writer::default();
                w.cause(cause::ACCEPTED);
                self.created(&mut w, &chosen);
                (cp, w)
            }
            Err(r) => {
                let mut w = Writer::default();
                w.cause(r.0);
                (cp, w)
            }
        }
    }

    fn delete(&mut self, m: &Message<'_>) -> (u64, Writer) {
        let table = self.shared.table.load_full();
        let Some(s) = m.header.seid.and_then(|s| table.sessions.get(&s)) else {
            return (
                0,
                self.refusal((cause::SESSION_NOT_FOUND, "no such session".into())),
            );
        };
        let mut w = Writer::default();
        w.cause(cause::ACCEPTED);
        for (n, u) in s.urrs.iter().enumerate() {
            let v = self.shared.volume(self.settings.accounting, s.seid, u.id);
            w.group(ty::USAGE_REPORT_DELETION, |w| {
                w.ie(ty::URR_ID, &u.id.to_be_bytes());
                w.ie(ty::UR_SEQN, &(n as u32).to_be_bytes());
                // TERMR: the session ended
                w.ie(ty::USAGE_REPORT_TRIGGER, &[0, 0x08, 0]);
                let mut vol = vec![0x3f];
                for x in [
                    v.ul_bytes + v.dl_bytes,
                    v.ul_bytes,
                    v.dl_bytes,
                    v.ul_packets + v.dl_packets,
                    v.ul_packets,
                    v.dl_packets,
                ] {
                    vol.extend_from_slice(&x.to_be_bytes());
                }
                w.ie(ty::VOLUME_MEASUREMENT, &vol);
            });
        }
        let cp = s.cp_seid;
        self.shared.table.store(Arc::new(table.without(s.seid)));
        (cp, w)
    }
}
