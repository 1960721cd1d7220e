//! A session's rules in PFCP (TS 29.244 §7.5.2–7.5.4): the Create, Update
//! and Remove IEs of PDRs, FARs, QERs and URRs read into [`rules`] and
//! applied to a session ([`apply`]), and written by an SMF ([`Rules`]).

use core::net::Ipv4Addr;
use std::sync::Arc;

use super::ie::{ty, Ie, IeError, Ies, Writer};
use super::msg::cause;
use crate::upf::rate::Gcra;
use crate::upf::rules::{Action, Far, Interface, Pdr, Qer, Session, Urr};
use crate::upf::sdf::SdfFilter;

/// A request's failure: its cause and what was wrong.
pub type Refusal = (u8, String);

fn incorrect(e: IeError) -> Refusal {
    let c = if e.0.contains("missing") {
        cause::MANDATORY_IE_MISSING
    } else {
        cause::MANDATORY_IE_INCORRECT
    };
    (c, e.0)
}

/// A QER as PFCP describes it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct QerSpec {
    /// Its id.
    pub id: u32,
    /// Uplink gate open.
    pub ul_open: bool,
    /// Downlink gate open.
    pub dl_open: bool,
    /// Maximum bit rates (kbit/s), uplink and downlink (0: none).
    pub mbr: Option<(u64, u64)>,
    /// QoS flow id.
    pub qfi: Option<u8>,
}

impl QerSpec {
    /// The rule, rate state new.
    pub fn build(&self, burst: u64) -> Qer {
        let g = |k: u64| (k > 0).then(|| Arc::new(Gcra::new(k, burst)));
        Qer {
            id: self.id,
            ul_open: self.ul_open,
            dl_open: self.dl_open,
            ul: self.mbr.and_then(|m| g(m.0)),
            dl: self.mbr.and_then(|m| g(m.1)),
            qfi: self.qfi,
        }
    }
}

fn ipv4(b: &[u8]) -> Option<Ipv4Addr> {
    Some(Ipv4Addr::from(<[u8; 4]>::try_from(b.get(..4)?).ok()?))
}

/// An F-TEID: its TEID, or the UPF to choose one (CH), the same for every
/// PDR of a request with the same choose id (CHID).
enum FTeid {
    Given(u32),
    Choose(Option<u8>),
}

fn f_teid(ie: &Ie<'_>) -> Result<FTeid, IeError> {
    let flags = ie.u8()?;
    if flags & 0x04 != 0 {
        let chid = (flags & 0x08 != 0)
            .then(|| {
                ie.value
                    .get(1)
                    .copied()
                    .ok_or_else(|| IeError("F-TEID's CHID missing".into()))
            })
            .transpose()?;
        return Ok(FTeid::Choose(chid));
    }
    ie.value
        .get(1..5)
        .map(|b| FTeid::Given(u32::from_be_bytes(b.try_into().expect("4 bytes"))))
        .ok_or_else(|| IeError("F-TEID cut short".into()))
}

/// Reads a PDR's fields from the members of a Create or Update PDR; `base`
/// is the rule updated (none: created, and then PDR ID, precedence, PDI
/// and FAR ID are mandatory). Also whether the UPF must choose its TEID
/// (and under which CHID).
fn read_pdr(g: Ies<'_>, base: Option<&Pdr>) -> Result<(Pdr, Option<Option<u8>>), IeError> {
    let id = g.need(ty::PDR_ID, "PDR ID")?.u16()?;
    let mut p = base.cloned().unwrap_or(Pdr {
        id,
        precedence: 0,
        source: Interface::Access,
        teid: None,
        ue: None,
        sdf: None,
        remove_outer: false,
        far: 0,
        qers: Vec::new(),
        urrs: Vec::new(),
    });
    let created = base.is_none();
    let mut choose = None;
    let need = |t: u16, what: &str| -> Result<Option<Ie<'_>>, IeError> {
        match g.find(t)? {
            None if created => Err(IeError(format!("{what} (IE {t}) is missing"))),
            x => Ok(x),
        }
    };
    if let Some(ie) = need(ty::PRECEDENCE, "Precedence")? {
        p.precedence = ie.u32()?;
    }
    if let Some(pdi) = need(ty::PDI, "PDI")? {
        let pdi = pdi.group();
        let src = pdi.need(ty::SOURCE_INTERFACE, "Source Interface")?.u8()?;
        p.source = Interface::from_pfcp(src).ok_or_else(|| {
            IeError(format!(
                "source interface {src} is not served (access or core)"
            ))
        })?;
        p.teid = None;
        if let Some(ie) = pdi.find(ty::F_TEID)? {
            match f_teid(&ie)? {
                FTeid::Given(t) => p.teid = Some(t),
                FTeid::Choose(chid) => choose = Some(chid),
            }
        }
        p.ue = match pdi.find(ty::UE_IP_ADDRESS)? {
            Some(ie) if ie.u8()? & 0x02 != 0 => Some(
                ipv4(&ie.value[1..]).ok_or_else(|| IeError("UE IP Address cut short".into()))?,
            ),
            Some(_) => return Err(IeError("only IPv4 UE addresses are served".into())),
            None => None,
        };
        p.sdf = match pdi.find(ty::SDF_FILTER)? {
            Some(ie) => {
                let v = ie.value;
                if v.first().is_none_or(|f| f & 0x01 == 0) || v.len() < 4 {
                    return Err(IeError("an SDF filter without a flow description".into()));
                }
                let n = usize::from(u16::from_be_bytes([v[2], v[3]]));
                let text = v
                    .get(4..4 + n)
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .ok_or_else(|| IeError("flow description cut short or not text".into()))?;
                Some(SdfFilter::parse(text).map_err(IeError)?)
            }
            None => None,
        };
    }
    if let Some(ie) = g.find(ty::OUTER_HEADER_REMOVAL)? {
        p.remove_outer = ie.u8()? == 0;
    }
    if let Some(ie) = need(ty::FAR_ID, "FAR ID")? {
        p.far = ie.u32()?;
    }
    let ids = |t: u16| -> Result<Vec<u32>, IeError> {
        g.filter_map(|r| r.map(|ie| (ie.ty == t).then_some(ie)).transpose())
            .map(|ie| ie.and_then(|ie| ie.u32()))
            .collect()
    };
    let (qers, urrs) = (ids(ty::QER_ID)?, ids(ty::URR_ID)?);
    if created || !qers.is_empty() {
        p.qers = qers;
    }
    if created || !urrs.is_empty() {
        p.urrs = urrs;
    }
    Ok((p, choose))
}

fn read_action(ie: &Ie<'_>) -> Result<Action, IeError> {
    let a = ie.u8()?;
    if a & 0x01 != 0 {
        Ok(Action::Drop)
    } else if a & 0x04 != 0 {
        Ok(Action::Buffer)
    } else if a & 0x02 != 0 {
        Ok(Action::Forward)
    } else {
        Err(IeError(format!(
            "apply action {a:#04x}: none of DROP, FORW, BUFF"
        )))
    }
}

fn read_tunnel(params: Ies<'_>) -> Result<Option<(u32, Ipv4Addr)>, IeError> {
    let Some(ie) = params.find(ty::OUTER_HEADER_CREATION)? else {
        return Ok(None);
    };
    let v = ie.value;
    if v.len() < 10 || v[0] & 0x01 == 0 {
        return Err(IeError(
            "outer header creation: only GTP-U/UDP/IPv4 is served".into(),
        ));
    }
    let teid = u32::from_be_bytes(v[2..6].try_into().expect("4 bytes"));
    Ok(Some((teid, ipv4(&v[6..]).expect("checked length"))))
}

fn read_far(g: Ies<'_>, base: Option<&Far>) -> Result<Far, IeError> {
    let id = g.need(ty::FAR_ID, "FAR ID")?.u32()?;
    let mut f = base.cloned().unwrap_or(Far {
        id,
        action: Action::Drop,
        tunnel: None,
    });
    match g.find(ty::APPLY_ACTION)? {
        Some(ie) => f.action = read_action(&ie)?,
        None if base.is_none() => return Err(IeError("Apply Action (IE 44) is missing".into())),
        None => {}
    }
    let params = if base.is_none() {
        ty::FORWARDING_PARAMETERS
    } else {
        ty::UPDATE_FORWARDING_PARAMETERS
    };
    if let Some(p) = g.find(params)? {
        if let Some(t) = read_tunnel(p.group())? {
            f.tunnel = Some(t);
        }
    }
    Ok(f)
}

fn read_qer(g: Ies<'_>, base: Option<&QerSpec>) -> Result<QerSpec, IeError> {
    let id = g.need(ty::QER_ID, "QER ID")?.u32()?;
    let mut q = base.copied().unwrap_or(QerSpec {
        id,
        ul_open: true,
        dl_open: true,
        mbr: None,
        qfi: None,
    });
    if let Some(ie) = g.find(ty::GATE_STATUS)? {
        let s = ie.u8()?;
        q.ul_open = (s >> 2) & 0x03 == 0;
        q.dl_open = s & 0x03 == 0;
    }
    if let Some(ie) = g.find(ty::MBR)? {
        let b = ie.bytes::<10>()?;
        let kbps = |b: &[u8]| b.iter().fold(0u64, |a, &x| a << 8 | u64::from(x));
        q.mbr = Some((kbps(&b[..5]), kbps(&b[5..])));
    }
    if let Some(ie) = g.find(ty::QFI)? {
        q.qfi = Some(ie.u8()? & 0x3f);
    }
    Ok(q)
}

fn spec_of(q: &Qer) -> QerSpec {
    QerSpec {
        id: q.id,
        ul_open: q.ul_open,
        dl_open: q.dl_open,
        mbr: (q.ul.is_some() || q.dl.is_some()).then(|| {
            (
                q.ul.as_ref().map_or(0, |g| g.kbps),
                q.dl.as_ref().map_or(0, |g| g.kbps),
            )
        }),
        qfi: q.qfi,
    }
}

/// A rule's id IE of type `t` inside a grouped IE.
fn id_of(g: Ies<'_>, t: u16, what: &str) -> Result<u32, Refusal> {
    let ie = g.need(t, what).map_err(incorrect)?;
    if t == ty::PDR_ID {
        ie.u16().map(u32::from).map_err(incorrect)
    } else {
        ie.u32().map_err(incorrect)
    }
}

/// Applies a request's Create, Update and Remove IEs to `s`; `choose` gives
/// a TEID the UPF owns when the SMF asks it to. The PDRs whose TEID was
/// chosen come back (for Created PDR IEs).
pub fn apply(
    s: &mut Session,
    ies: Ies<'_>,
    burst: u64,
    choose: &mut dyn FnMut() -> u32,
) -> Result<Vec<(u16, u32)>, Refusal> {
    let mut chosen = Vec::new();
    let mut by_chid: Vec<(u8, u32)> = Vec::new();
    for ie in ies {
        let ie = ie.map_err(incorrect)?;
        let g = ie.group();
        match ie.ty {
            ty::CREATE_PDR | ty::UPDATE_PDR => {
                let update = ie.ty == ty::UPDATE_PDR;
                if let Some(c) = put_pdr(s, g, update, &mut by_chid, choose)? {
                    chosen.push(c);
                }
            }
            ty::CREATE_FAR | ty::UPDATE_FAR => put_far(s, g, ie.ty == ty::UPDATE_FAR)?,
            ty::CREATE_QER | ty::UPDATE_QER => put_qer(s, g, ie.ty == ty::UPDATE_QER, burst)?,
            ty::CREATE_URR => {
                let id = id_of(g, ty::URR_ID, "URR ID")?;
                if !s.urrs.iter().any(|u| u.id == id) {
                    s.urrs.push(Urr {
                        id,
                        strict: Default::default(),
                        slot: Default::default(),
                    });
                }
            }
            ty::REMOVE_PDR => {
                s.remove_pdr(id_of(g, ty::PDR_ID, "PDR ID")? as u16);
            }
            ty::REMOVE_FAR => {
                let id = id_of(g, ty::FAR_ID, "FAR ID")?;
                s.fars.retain(|x| x.id != id);
            }
            ty::REMOVE_QER => {
                let id = id_of(g, ty::QER_ID, "QER ID")?;
                s.qers.retain(|x| x.id != id);
            }
            ty::REMOVE_URR => {
                let id = id_of(g, ty::URR_ID, "URR ID")?;
                s.urrs.retain(|x| x.id != id);
            }
            _ => {}
        }
    }
    s.check().map_err(|e| (cause::RULE_FAILURE, e))?;
    Ok(chosen)
}

/// A Create or Update PDR; the TEID chosen for it, if the SMF asked.
fn put_pdr(
    s: &mut Session,
    g: Ies<'_>,
    update: bool,
    by_chid: &mut Vec<(u8, u32)>,
    choose: &mut dyn FnMut() -> u32,
) -> Result<Option<(u16, u32)>, Refusal> {
    let base = if update {
        let id = id_of(g, ty::PDR_ID, "PDR ID")? as u16;
        let p = s.pdrs().find(|p| p.id == id).cloned();
        Some(p.ok_or((cause::RULE_FAILURE, format!("no PDR {id} to update")))?)
    } else {
        None
    };
    let (mut p, ch) = read_pdr(g, base.as_ref()).map_err(incorrect)?;
    let mut chosen = None;
    if let Some(chid) = ch {
        let t = match chid.and_then(|c| by_chid.iter().find(|x| x.0 == c)) {
            Some(&(_, t)) => t,
            None => {
                let t = choose();
                if let Some(c) = chid {
                    by_chid.push((c, t));
                }
                t
            }
        };
        p.teid = Some(t);
        chosen = Some((p.id, t));
    }
    s.put_pdr(p);
    Ok(chosen)
}

fn put_far(s: &mut Session, g: Ies<'_>, update: bool) -> Result<(), Refusal> {
    let id = id_of(g, ty::FAR_ID, "FAR ID")?;
    let base = s.far(id).cloned();
    if update && base.is_none() {
        return Err((cause::RULE_FAILURE, format!("no FAR {id} to update")));
    }
    let f = read_far(g, if update { base.as_ref() } else { None }).map_err(incorrect)?;
    s.fars.retain(|x| x.id != id);
    s.fars.push(f);
    Ok(())
}

fn put_qer(s: &mut Session, g: Ies<'_>, update: bool, burst: u64) -> Result<(), Refusal> {
    let id = id_of(g, ty::QER_ID, "QER ID")?;
    let base = s.qer(id).map(spec_of);
    if update && base.is_none() {
        return Err((cause::RULE_FAILURE, format!("no QER {id} to update")));
    }
    let q = read_qer(g, if update { base.as_ref() } else { None }).map_err(incorrect)?;
    // an unchanged rule keeps its rate state
    let keep = s.qer(id).filter(|old| spec_of(old) == q).cloned();
    s.qers.retain(|x| x.id != id);
    s.qers.push(keep.unwrap_or_else(|| q.build(burst)));
    Ok(())
}

/// Writes rules as an SMF sends them.
pub struct Rules<'a>(pub &'a mut Writer);

impl Rules<'_> {
    /// A Create PDR; `choose`: the UPF picks the TEID (CH), one for every
    /// PDR of the request with the same choose id (CHID).
    pub fn create_pdr(&mut self, p: &Pdr, choose: Option<u8>) -> &mut Self {
        self.pdr(ty::CREATE_PDR, p, choose)
    }

    /// An Update PDR carrying every field of `p`.
    pub fn update_pdr(&mut self, p: &Pdr) -> &mut Self {
        self.pdr(ty::UPDATE_PDR, p, None)
    }

    fn pdr(&mut self, t: u16, p: &Pdr, choose: Option<u8>) -> &mut Self {
        self.0.group(t, |w| {
            w.ie(ty::PDR_ID, &p.id.to_be_bytes());
            w.ie(ty::PRECEDENCE, &p.precedence.to_be_bytes());
            w.group(ty::PDI, |w| {
                w.ie(ty::SOURCE_INTERFACE, &[p.source.pfcp()]);
                if let Some(chid) = choose {
                    // V4, CH, CHID
                    w.ie(ty::F_TEID, &[0x0d, chid]);
                } else if let Some(t) = p.teid {
                    let mut v = vec![0x01];
                    v.extend_from_slice(&t.to_be_bytes());
                    v.extend_from_slice(&[0, 0, 0, 0]);
                    w.ie(ty::F_TEID, &v);
                }
                if let Some(ue) = p.ue {
                    // V4, and S/D: the destination on the downlink
                    let sd = if p.source == Interface::Core { 0x04 } else { 0 };
                    let mut v = vec![0x02 | sd];
                    v.extend_from_slice(&ue.octets());
                    w.ie(ty::UE_IP_ADDRESS, &v);
                }
                if let Some(f) = &p.sdf {
                    w.ie(ty::SDF_FILTER, &sdf_value(&describe(f)));
                }
            });
            if p.remove_outer {
                w.ie(ty::OUTER_HEADER_REMOVAL, &[0]);
            }
            w.ie(ty::FAR_ID, &p.far.to_be_bytes());
            for u in &p.urrs {
                w.ie(ty::URR_ID, &u.to_be_bytes());
            }
            for q in &p.qers {
                w.ie(ty::QER_ID, &q.to_be_bytes());
            }
        });
        self
    }

    /// A Create FAR.
    pub fn create_far(&mut self, f: &Far) -> &mut Self {
        self.far(ty::CREATE_FAR, ty::FORWARDING_PARAMETERS, f)
    }

    /// An Update FAR (its action, and its tunnel if it has one).
    pub fn update_far(&mut self, f: &Far) -> &mut Self {
        self.far(ty::UPDATE_FAR, ty::UPDATE_FORWARDING_PARAMETERS, f)
    }

    fn far(&mut self, t: u16, params: u16, f: &Far) -> &mut Self {
        self.0.group(t, |w| {
            w.ie(ty::FAR_ID, &f.id.to_be_bytes());
            let a = match f.action {
                Action::Drop => 0x01,
                Action::Forward => 0x02,
                Action::Buffer => 0x04,
            };
            w.ie(ty::APPLY_ACTION, &[a]);
            if f.action == Action::Forward {
                w.group(params, |w| {
                    let dest = if f.tunnel.is_some() {
                        Interface::Access
                    } else {
                        Interface::Core
                    };
                    if t == ty::CREATE_FAR {
                        w.ie(ty::DESTINATION_INTERFACE, &[dest.pfcp()]);
                    }
                    if let Some((teid, a)) = f.tunnel {
                        let mut v = vec![0x01, 0x00];
                        v.extend_from_slice(&teid.to_be_bytes());
                        v.extend_from_slice(&a.octets());
                        w.ie(ty::OUTER_HEADER_CREATION, &v);
                    }
                });
            }
        });
        self
    }

    /// A Create QER.
    pub fn create_qer(&mut self, q: &QerSpec) -> &mut Self {
        self.0.group(ty::CREATE_QER, |w| {
            w.ie(ty::QER_ID, &q.id.to_be_bytes());
            let gate = (u8::from(!q.ul_open) << 2) | u8::from(!q.dl_open);
            w.ie(ty::GATE_STATUS, &[gate]);
            if let Some((ul, dl)) = q.mbr {
                let mut v = ul.to_be_bytes()[3..].to_vec();
                v.extend_from_slice(&dl.to_be_bytes()[3..]);
                w.ie(ty::MBR, &v);
            }
            if let Some(qfi) = q.qfi {
                w.ie(ty::QFI, &[qfi]);
            }
        });
        self
    }

    /// A Create URR measuring volume.
    pub fn create_urr(&mut self, id: u32) -> &mut Self {
        self.0.group(ty::CREATE_URR, |w| {
            w.ie(ty::URR_ID, &id.to_be_bytes());
            w.ie(ty::MEASUREMENT_METHOD, &[0x02]);
            w.ie(ty::REPORTING_TRIGGERS, &[0, 0]);
        });
        self
    }
}

/// The text of a filter, as [`SdfFilter::parse`] reads it.
fn describe(f: &SdfFilter) -> String {
    let proto = f.proto.map_or("ip".to_string(), |p| p.to_string());
    let ports = |p: (u16, u16)| match p {
        (0, u16::MAX) => String::new(),
        (a, b) if a == b => format!(" {a}"),
        (a, b) => format!(" {a}-{b}"),
    };
    let net = |n: &ipnet::Ipv4Net| {
        if n.prefix_len() == 0 {
            "any".to_string()
        } else {
            n.to_string()
        }
    };
    format!(
        "permit out {proto} from {}{} to {}{}",
        net(&f.remote),
        ports(f.remote_ports),
        if f.ue.prefix_len() == 0 {
            "assigned".to_string()
        } else {
            net(&f.ue)
        },
        ports(f.ue_ports)
    )
}

fn sdf_value(text: &str) -> Vec<u8> {
    let mut v = vec![0x01, 0];
    v.extend_from_slice(&(text.len() as u16).to_be_bytes());
    v.extend_from_slice(text.as_bytes());
    v
}
