//! PFCP message headers (TS 29.244 §7.2.2) and the message types the UPF
//! answers.

/// Message types.
#[allow(missing_docs)]
pub mod kind {
    pub const HEARTBEAT_REQUEST: u8 = 1;
    pub const HEARTBEAT_RESPONSE: u8 = 2;
    pub const ASSOCIATION_SETUP_REQUEST: u8 = 5;
    pub const ASSOCIATION_SETUP_RESPONSE: u8 = 6;
    pub const SESSION_ESTABLISHMENT_REQUEST: u8 = 50;
    pub const SESSION_ESTABLISHMENT_RESPONSE: u8 = 51;
    pub const SESSION_MODIFICATION_REQUEST: u8 = 52;
    pub const SESSION_MODIFICATION_RESPONSE: u8 = 53;
    pub const SESSION_DELETION_REQUEST: u8 = 54;
    pub const SESSION_DELETION_RESPONSE: u8 = 55;
}

/// Cause values (TS 29.244 §8.2.1).
#[allow(missing_docs)]
pub mod cause {
    pub const ACCEPTED: u8 = 1;
    pub const REJECTED: u8 = 64;
    pub const SESSION_NOT_FOUND: u8 = 65;
    pub const MANDATORY_IE_MISSING: u8 = 66;
    pub const MANDATORY_IE_INCORRECT: u8 = 69;
    pub const NO_ASSOCIATION: u8 = 72;
    pub const RULE_FAILURE: u8 = 73;
    pub const NO_RESOURCES: u8 = 75;
    pub const SERVICE_NOT_SUPPORTED: u8 = 77;
}

/// A message's header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Message type.
    pub kind: u8,
    /// The SEID, for session messages.
    pub seid: Option<u64>,
    /// Sequence number (24 bits): a response carries its request's.
    pub seq: u32,
}

/// A message: header and the IEs after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    /// Its header.
    pub header: Header,
    /// Its IEs' bytes.
    pub body: &'a [u8],
}

impl<'a> Message<'a> {
    /// Parses a datagram.
    pub fn parse(b: &'a [u8]) -> Result<Message<'a>, String> {
        if b.len() < 8 {
            return Err(format!("{} bytes: shorter than a PFCP header", b.len()));
        }
        if b[0] >> 5 != 1 {
            return Err(format!("PFCP version {}, expected 1", b[0] >> 5));
        }
        let len = usize::from(u16::from_be_bytes([b[2], b[3]])) + 4;
        if b.len() < len {
            return Err(format!("the header says {len} bytes, {} came", b.len()));
        }
        let s = b[0] & 0x01 != 0;
        let at = if s { 12 } else { 4 };
        if len < at + 4 {
            return Err("a header shorter than its flags say".into());
        }
        let seid = s.then(|| u64::from_be_bytes(b[4..12].try_into().expect("8 bytes")));
        let seq = u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]]);
        Ok(Message {
            header: Header {
                kind: b[1],
                seid,
                seq,
            },
            body: &b[at + 4..len],
        })
    }

    /// The IEs.
    pub fn ies(&self) -> super::ie::Ies<'a> {
        super::ie::Ies(self.body)
    }
}

/// A datagram of `header` and the IEs `body`.
pub fn emit(header: &Header, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + body.len());
    out.push(0x20 | u8::from(header.seid.is_some()));
    out.push(header.kind);
    out.extend_from_slice(&[0, 0]);
    if let Some(seid) = header.seid {
        out.extend_from_slice(&seid.to_be_bytes());
    }
    out.extend_from_slice(&header.seq.to_be_bytes()[1..]);
    out.push(0);
    out.extend_from_slice(body);
    let len = (out.len() - 4) as u16;
    out[2..4].copy_from_slice(&len.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_short_ones_are_refused() {
        for seid in [None, Some(0x0102_0304_0506_0708)] {
            let h = Header {
                kind: kind::SESSION_MODIFICATION_REQUEST,
                seid,
                seq: 0x00ab_cdef,
            };
            let b = emit(&h, &[1, 2, 3, 4, 5]);
            let m = Message::parse(&b).unwrap();
            assert_eq!(m.header, h);
            assert_eq!(m.body, &[1, 2, 3, 4, 5]);
            assert!(Message::parse(&b[..b.len() - 1]).is_err());
        }
        assert!(Message::parse(&[0x40, 1, 0, 4, 0, 0, 0, 0])
            .unwrap_err()
            .contains("version"));
    }
}
