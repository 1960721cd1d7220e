//! `[[nf]] kind = "upf"`: the UPF's tunnel address, its PFCP endpoint, how
//! it accounts usage, its buffers, and sessions installed without an SMF.

use core::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use serde::Deserialize;

use super::{pfcp, simple_session, Upf, UpfShared};
use crate::config::{ConfigError, Fields};
use crate::fields::BuildNf;
use crate::Nf;

/// How URR volumes are shared between cores.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accounting {
    /// Per core, merged every merge period (the delayed merge).
    #[default]
    Merged,
    /// Counts every core adds to on every packet (atomics).
    Strict,
}

/// A session installed by configuration: one uplink and one downlink PDR,
/// both forwarding, one URR.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StaticSession {
    /// The UE's address.
    pub ue: Ipv4Addr,
    /// The uplink TEID (the UPF's).
    pub teid: u32,
    /// The gNB's tunnel address.
    pub gnb: Ipv4Addr,
    /// The downlink TEID (the gNB's).
    pub gnb_teid: u32,
}

/// `[nf.ues]`: a session for each of `count` UEs, numbered as `flowshift
/// gen --gtp-ues` numbers them ([`wire::gtpu::UeRange`]: UE i at
/// `ue` + i, uplink TEID `teid` + i, downlink TEID `gnb_teid` + i).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UesSection {
    /// UEs.
    pub count: u32,
    /// The first UE's address (default 10.60.0.1).
    pub ue: Option<Ipv4Addr>,
    /// The first uplink TEID (default 1).
    pub teid: Option<u32>,
    /// The gNB (default 192.0.2.2).
    pub gnb: Option<Ipv4Addr>,
    /// The first downlink TEID (default 0x01000001).
    pub gnb_teid: Option<u32>,
}

impl UesSection {
    /// The range, defaults filled in.
    pub fn range(&self) -> wire::gtpu::UeRange {
        let d = wire::gtpu::UeRange::new(self.count);
        wire::gtpu::UeRange {
            count: self.count,
            ue: self.ue.unwrap_or(d.ue),
            teid: self.teid.unwrap_or(d.teid),
            gnb: self.gnb.unwrap_or(d.gnb),
            gnb_teid: self.gnb_teid.unwrap_or(d.gnb_teid),
        }
    }
}

/// `[[nf]] kind = "upf"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UpfSection {
    /// Name in the chain.
    pub name: Option<String>,
    /// The UPF's GTP-U (N3) address: uplink G-PDUs come to it, downlink
    /// ones leave from it.
    pub n3: Ipv4Addr,
    /// Where PFCP listens (`address:port`, port 8805 for an SMF); none: no
    /// SMF, only `session`s.
    pub pfcp: Option<SocketAddr>,
    /// PFCP's node id (default: the N3 address).
    pub node_id: Option<Ipv4Addr>,
    /// How URR volumes are shared between cores.
    #[serde(default)]
    pub accounting: Accounting,
    /// Packets a buffering FAR holds per session on each core (default 64).
    pub buffer: Option<usize>,
    /// Bytes a QER's rate lets through at once (default 64 KiB).
    pub qer_burst: Option<u64>,
    /// Sessions without an SMF.
    #[serde(default)]
    pub session: Vec<StaticSession>,
    /// A session for each UE of a numbered range, without an SMF.
    pub ues: Option<UesSection>,
}

impl BuildNf for UpfSection {
    fn build(&self, f: &Fields<'_>) -> Result<Box<dyn Nf>, ConfigError> {
        let shared = Arc::new(UpfShared::default());
        let mut table = super::rules::Table::default();
        for (i, s) in self.session.iter().enumerate() {
            let seid = i as u64 + 1;
            table = table
                .with(simple_session(seid, s.ue, s.teid, s.gnb, s.gnb_teid))
                .map_err(|e| f.err(&format!("session[{i}]"), e))?;
        }
        if let Some(u) = &self.ues {
            let r = u.range();
            r.check().map_err(|e| f.err("ues", e))?;
            let first = self.session.len() as u64 + 1;
            for i in 0..r.count {
                let (ue, teid, gnb_teid) = r.ue(i);
                table = table
                    .with(simple_session(
                        first + u64::from(i),
                        ue,
                        teid,
                        r.gnb,
                        gnb_teid,
                    ))
                    .map_err(|e| f.err("ues", e))?;
            }
        }
        shared.table.store(Arc::new(table));
        let buffer = self.buffer.unwrap_or(64);
        if buffer == 0 {
            return Err(f.err(
                "buffer",
                "0 packets: a buffering FAR could hold nothing (at least 1)",
            ));
        }
        let pfcp = self.pfcp.map(|addr| {
            (
                addr,
                pfcp::Settings {
                    node_id: self.node_id.unwrap_or(self.n3),
                    n3: self.n3,
                    accounting: self.accounting,
                    qer_burst: self.qer_burst.unwrap_or(64 * 1024),
                },
            )
        });
        let name = self.name.clone().unwrap_or_else(|| "upf".into());
        Ok(Box::new(Upf::new(
            name,
            self.n3,
            self.accounting,
            buffer,
            shared,
            pfcp,
        )))
    }
}
