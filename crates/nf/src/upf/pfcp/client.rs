//! An SMF's side of PFCP, enough to drive a UPF: association, session
//! establishment, modification and deletion, each a request sent again until
//! its response comes (TS 29.244 §6.4: the same sequence number).

use core::net::{Ipv4Addr, SocketAddr};
use std::net::UdpSocket;
use std::time::Duration;

use super::codec::Rules;
use super::ie::{self, ty, Writer};
use super::msg::{cause, emit, kind, Header, Message};
use crate::upf::rules::Volume;

/// What a response said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    /// Its cause (1: accepted).
    pub cause: u8,
    /// The UPF's SEID (establishment).
    pub seid: Option<u64>,
    /// TEIDs the UPF chose, by PDR.
    pub created: Vec<(u16, u32)>,
    /// Volumes reported, by URR (deletion).
    pub usage: Vec<(u32, Volume)>,
}

impl Reply {
    /// True for "request accepted".
    pub fn accepted(&self) -> bool {
        self.cause == cause::ACCEPTED
    }
}

/// An SMF talking to one UPF.
pub struct Smf {
    socket: UdpSocket,
    upf: SocketAddr,
    node: Ipv4Addr,
    seq: u32,
    /// Times a request is sent before giving up.
    pub tries: u32,
    /// Every datagram sent (`true`) and received, when kept (to write a
    /// capture of the exchange).
    pub log: Option<Vec<(bool, Vec<u8>)>>,
}

impl Smf {
    /// An SMF of node id `node` for the UPF at `upf`.
    pub fn new(upf: SocketAddr, node: Ipv4Addr) -> std::io::Result<Smf> {
        let any: SocketAddr = if upf.is_ipv4() {
            "0.0.0.0:0".parse().expect("an address")
        } else {
            "[::]:0".parse().expect("an address")
        };
        let socket = UdpSocket::bind(any)?;
        socket.set_read_timeout(Some(Duration::from_millis(500)))?;
        Ok(Smf {
            socket,
            upf,
            node,
            seq: 0,
            tries: 4,
            log: None,
        })
    }

    /// Sends a request and waits for its response.
    pub fn request(&mut self, k: u8, seid: Option<u64>, body: &[u8]) -> std::io::Result<Reply> {
        self.seq = (self.seq + 1) & 0x00ff_ffff;
        let req = emit(
            &Header {
                kind: k,
                seid,
                seq: self.seq,
            },
            body,
        );
        let mut buf = vec![0u8; 65_536];
        for _ in 0..self.tries {
            self.socket.send_to(&req, self.upf)?;
            if let Some(l) = &mut self.log {
                l.push((true, req.clone()));
            }
            loop {
                let n = match self.socket.recv_from(&mut buf) {
                    Ok((n, _)) => n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        break
                    }
                    Err(e) => return Err(e),
                };
                let Ok(m) = Message::parse(&buf[..n]) else {
                    continue;
                };
                if m.header.seq != self.seq || m.header.kind != k + 1 {
                    continue;
                }
                if let Some(l) = &mut self.log {
                    l.push((false, buf[..n].to_vec()));
                }
                return read_reply(&m).map_err(std::io::Error::other);
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no PFCP response from {} after {} tries",
                self.upf, self.tries
            ),
        ))
    }

    /// Association setup.
    pub fn associate(&mut self) -> std::io::Result<Reply> {
        let mut w = Writer::default();
        w.node_id(self.node)
            .ie(ty::RECOVERY_TIME_STAMP, &[0, 0, 0, 1]);
        self.request(kind::ASSOCIATION_SETUP_REQUEST, None, &w.out)
    }

    /// A heartbeat.
    pub fn heartbeat(&mut self) -> std::io::Result<Reply> {
        let mut w = Writer::default();
        w.ie(ty::RECOVERY_TIME_STAMP, &[0, 0, 0, 1]);
        self.request(kind::HEARTBEAT_REQUEST, None, &w.out)
    }

    /// Establishes session `cp_seid` (the SMF's) with the rules `rules`
    /// writes.
    pub fn establish(
        &mut self,
        cp_seid: u64,
        rules: impl FnOnce(&mut Rules<'_>),
    ) -> std::io::Result<Reply> {
        let mut w = Writer::default();
        w.node_id(self.node).f_seid(cp_seid, self.node);
        rules(&mut Rules(&mut w));
        self.request(kind::SESSION_ESTABLISHMENT_REQUEST, Some(0), &w.out)
    }

    /// Modifies the UPF's session `seid`.
    pub fn modify(
        &mut self,
        seid: u64,
        rules: impl FnOnce(&mut Rules<'_>),
    ) -> std::io::Result<Reply> {
        let mut w = Writer::default();
        rules(&mut Rules(&mut w));
        self.request(kind::SESSION_MODIFICATION_REQUEST, Some(seid), &w.out)
    }

    /// Deletes the UPF's session `seid`; the reply carries its usage.
    pub fn delete(&mut self, seid: u64) -> std::io::Result<Reply> {
        self.request(kind::SESSION_DELETION_REQUEST, Some(seid), &[])
    }
}

fn read_reply(m: &Message<'_>) -> Result<Reply, String> {
    let e = |e: ie::IeError| e.0;
    let mut r = Reply::default();
    for x in m.ies() {
        let x = x.map_err(e)?;
        match x.ty {
            ty::CAUSE => r.cause = x.u8().map_err(e)?,
            ty::F_SEID => r.seid = Some(ie::f_seid(&x).map_err(e)?),
            ty::CREATED_PDR => {
                let g = x.group();
                let pdr = g
                    .need(ty::PDR_ID, "PDR ID")
                    .and_then(|i| i.u16())
                    .map_err(e)?;
                let t = g.need(ty::F_TEID, "F-TEID").map_err(e)?;
                let teid = t.value.get(1..5).ok_or("F-TEID cut short")?;
                r.created
                    .push((pdr, u32::from_be_bytes(teid.try_into().expect("4 bytes"))));
            }
            ty::USAGE_REPORT_DELETION => {
                let g = x.group();
                let urr = g
                    .need(ty::URR_ID, "URR ID")
                    .and_then(|i| i.u32())
                    .map_err(e)?;
                let v = g
                    .need(ty::VOLUME_MEASUREMENT, "Volume Measurement")
                    .map_err(e)?;
                r.usage.push((urr, volume(v.value)?));
            }
            _ => {}
        }
    }
    Ok(r)
}

/// A Volume Measurement's volumes (the fields its flags say are there).
fn volume(v: &[u8]) -> Result<Volume, String> {
    let flags = *v.first().ok_or("an empty Volume Measurement")?;
    let mut vals = [0u64; 6];
    let mut at = 1;
    for (i, val) in vals.iter_mut().enumerate() {
        if flags & (1 << i) != 0 {
            let b = v.get(at..at + 8).ok_or("Volume Measurement cut short")?;
            *val = u64::from_be_bytes(b.try_into().expect("8 bytes"));
            at += 8;
        }
    }
    Ok(Volume {
        ul_bytes: vals[1],
        dl_bytes: vals[2],
        ul_packets: vals[4],
        dl_packets: vals[5],
    })
}
