//! PFCP information elements (TS 29.244 §8.1): type (2 bytes), length (2
//! bytes), value; a grouped IE's value is more IEs. [`Ies`] walks them from
//! untrusted bytes, [`Writer`] puts them.

use core::net::Ipv4Addr;

/// IE types flowshift reads or writes (TS 29.244 Table 8.1.2-1).
#[allow(missing_docs)]
pub mod ty {
    pub const CREATE_PDR: u16 = 1;
    pub const PDI: u16 = 2;
    pub const CREATE_FAR: u16 = 3;
    pub const FORWARDING_PARAMETERS: u16 = 4;
    pub const CREATE_URR: u16 = 6;
    pub const CREATE_QER: u16 = 7;
    pub const CREATED_PDR: u16 = 8;
    pub const UPDATE_PDR: u16 = 9;
    pub const UPDATE_FAR: u16 = 10;
    pub const UPDATE_FORWARDING_PARAMETERS: u16 = 11;
    pub const UPDATE_QER: u16 = 14;
    pub const REMOVE_PDR: u16 = 15;
    pub const REMOVE_FAR: u16 = 16;
    pub const REMOVE_URR: u16 = 17;
    pub const REMOVE_QER: u16 = 18;
    pub const CAUSE: u16 = 19;
    pub const SOURCE_INTERFACE: u16 = 20;
    pub const F_TEID: u16 = 21;
    pub const SDF_FILTER: u16 = 23;
    pub const GATE_STATUS: u16 = 25;
    pub const MBR: u16 = 26;
    pub const PRECEDENCE: u16 = 29;
    pub const REPORTING_TRIGGERS: u16 = 37;
    pub const DESTINATION_INTERFACE: u16 = 42;
    pub const APPLY_ACTION: u16 = 44;
    pub const PDR_ID: u16 = 56;
    pub const F_SEID: u16 = 57;
    pub const NODE_ID: u16 = 60;
    pub const MEASUREMENT_METHOD: u16 = 62;
    pub const USAGE_REPORT_TRIGGER: u16 = 63;
    pub const VOLUME_MEASUREMENT: u16 = 66;
    pub const USAGE_REPORT_DELETION: u16 = 79;
    pub const URR_ID: u16 = 81;
    pub const OUTER_HEADER_CREATION: u16 = 84;
    pub const UE_IP_ADDRESS: u16 = 93;
    pub const OUTER_HEADER_REMOVAL: u16 = 95;
    pub const RECOVERY_TIME_STAMP: u16 = 96;
    pub const UR_SEQN: u16 = 104;
    pub const FAR_ID: u16 = 108;
    pub const QER_ID: u16 = 109;
    pub const QFI: u16 = 124;
}

/// One IE.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ie<'a> {
    /// Its type.
    pub ty: u16,
    /// Its value.
    pub value: &'a [u8],
}

/// Why IEs could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IeError(pub String);

impl<'a> Ie<'a> {
    /// The IEs inside a grouped IE.
    pub fn group(&self) -> Ies<'a> {
        Ies(self.value)
    }

    /// The value's first `N` bytes.
    pub fn bytes<const N: usize>(&self) -> Result<[u8; N], IeError> {
        self.value
            .get(..N)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                IeError(format!(
                    "IE {} is {} bytes, needs {N}",
                    self.ty,
                    self.value.len()
                ))
            })
    }

    /// A 1-byte value.
    pub fn u8(&self) -> Result<u8, IeError> {
        self.bytes::<1>().map(|b| b[0])
    }

    /// A 2-byte value.
    pub fn u16(&self) -> Result<u16, IeError> {
        self.bytes().map(u16::from_be_bytes)
    }

    /// A 4-byte value.
    pub fn u32(&self) -> Result<u32, IeError> {
        self.bytes().map(u32::from_be_bytes)
    }
}

/// IEs in a run of bytes.
#[derive(Copy, Clone, Debug)]
pub struct Ies<'a>(pub &'a [u8]);

impl<'a> Iterator for Ies<'a> {
    type Item = Result<Ie<'a>, IeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let b = self.0;
        if b.len() < 4 {
            self.0 = &[];
            return Some(Err(IeError("an IE header cut short".into())));
        }
        let ty = u16::from_be_bytes([b[0], b[1]]);
        let len = usize::from(u16::from_be_bytes([b[2], b[3]]));
        let Some(value) = b.get(4..4 + len) else {
            self.0 = &[];
            return Some(Err(IeError(format!(
                "IE {ty} says {len} bytes, {} follow",
                b.len() - 4
            ))));
        };
        self.0 = &b[4 + len..];
        Some(Ok(Ie { ty, value }))
    }
}

impl<'a> Ies<'a> {
    /// The first IE of type `ty`.
    pub fn find(self, ty: u16) -> Result<Option<Ie<'a>>, IeError> {
        for ie in self {
            let ie = ie?;
            if ie.ty == ty {
                return Ok(Some(ie));
            }
        }
        Ok(None)
    }

    /// The first IE of type `ty`, or an error naming `what`.
    pub fn need(self, ty: u16, what: &str) -> Result<Ie<'a>, IeError> {
        self.find(ty)?
            .ok_or_else(|| IeError(format!("{what} (IE {ty}) is missing")))
    }
}

/// Writes IEs.
#[derive(Debug, Default)]
pub struct Writer {
    /// The bytes written.
    pub out: Vec<u8>,
}

impl Writer {
    /// An IE with `value`.
    pub fn ie(&mut self, ty: u16, value: &[u8]) -> &mut Self {
        self.out.extend_from_slice(&ty.to_be_bytes());
        self.out
            .extend_from_slice(&(value.len() as u16).to_be_bytes());
        self.out.extend_from_slice(value);
        self
    }

    /// A grouped IE whose members `f` writes.
    pub fn group(&mut self, ty: u16, f: impl FnOnce(&mut Writer)) -> &mut Self {
        let at = self.out.len();
        self.out.extend_from_slice(&ty.to_be_bytes());
        self.out.extend_from_slice(&[0, 0]);
        f(self);
        let len = (self.out.len() - at - 4) as u16;
        self.out[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
        self
    }

    /// A Node ID of an IPv4 address.
    pub fn node_id(&mut self, a: Ipv4Addr) -> &mut Self {
        let o = a.octets();
        self.ie(ty::NODE_ID, &[0, o[0], o[1], o[2], o[3]])
    }

    /// An F-SEID of an IPv4 address.
    pub fn f_seid(&mut self, seid: u64, a: Ipv4Addr) -> &mut Self {
        let mut v = vec![0x02];
        v.extend_from_slice(&seid.to_be_bytes());
        v.extend_from_slice(&a.octets());
        self.ie(ty::F_SEID, &v)
    }

    /// A Cause.
    pub fn cause(&mut self, c: u8) -> &mut Self {
        self.ie(ty::CAUSE, &[c])
    }
}

/// Reads an F-SEID's SEID (its address is not needed: replies go to where
/// the request came from).
pub fn f_seid(ie: &Ie<'_>) -> Result<u64, IeError> {
    let v = ie.value;
    v.get(1..9)
        .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
        .ok_or_else(|| IeError("F-SEID cut short".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_ies_round_trip_and_bad_lengths_are_errors() {
        let mut w = Writer::default();
        w.group(ty::CREATE_PDR, |w| {
            w.ie(ty::PDR_ID, &7u16.to_be_bytes());
            w.ie(ty::PRECEDENCE, &100u32.to_be_bytes());
        })
        .cause(1);
        let all: Vec<_> = Ies(&w.out).collect::<Result<_, _>>().unwrap();
        assert_eq!(all.len(), 2);
        let id = all[0].group().need(ty::PDR_ID, "PDR ID").unwrap();
        assert_eq!(id.u16().unwrap(), 7);
        assert!(all[0]
            .group()
            .need(ty::FAR_ID, "FAR ID")
            .unwrap_err()
            .0
            .contains("FAR ID"));
        let mut cut = w.out.clone();
        cut.truncate(cut.len() - 1);
        assert!(Ies(&cut).any(|r| r.is_err()));
        assert!(Ies(&[0, 1, 0]).any(|r| r.is_err()));
    }
}
