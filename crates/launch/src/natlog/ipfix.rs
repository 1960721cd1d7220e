//! NAT events as IPFIX (RFC 7011) with RFC 8158's NAT information elements:
//! each message carries the template (set 2) and a data set of records
//! (NAT44 BIB create/delete: time, event, protocol, inside address and port,
//! outside address and port). Over UDP a collector may start listening at any
//! time and messages may be lost, so the template goes with every message
//! (RFC 7011 §8.4 has the exporter resend it; 36 bytes each time).

use core::net::Ipv4Addr;

use nf::nat::NatEvent;

/// The template's id (data sets carry it as their set id).
pub const TEMPLATE: u16 = 256;
/// natEvent: NAT44 BIB create (RFC 8158 §4, IANA "natEvent").
pub const NAT44_BIB_CREATE: u8 = 8;
/// natEvent: NAT44 BIB delete.
pub const NAT44_BIB_DELETE: u8 = 9;
/// The largest message: a UDP datagram that fits a 1 500-byte path.
pub const MAX_MESSAGE: usize = 1_400;

/// (information element id, length) of the template's fields, in order.
const FIELDS: [(u16, u16); 7] = [
    (323, 8), // observationTimeMilliseconds
    (230, 1), // natEvent
    (4, 1),   // protocolIdentifier
    (8, 4),   // sourceIPv4Address
    (7, 2),   // sourceTransportPort
    (225, 4), // postNATSourceIPv4Address
    (227, 2), // postNAPTSourceTransportPort
];
/// Bytes of one data record.
pub const RECORD: usize = 22;
const HEADER: usize = 16;
const TEMPLATE_SET: usize = 4 + 4 + FIELDS.len() * 4;

/// Records per message.
pub const PER_MESSAGE: usize = (MAX_MESSAGE - HEADER - TEMPLATE_SET - 4) / RECORD;

/// One message of `events` (at most [`PER_MESSAGE`]), all observed at
/// `time_ms` (Unix ms); `sequence` counts the data records sent before it
/// (RFC 7011 §3.1), `domain` is the observation domain.
pub fn message(events: &[NatEvent], time_ms: u64, sequence: u32, domain: u32) -> Vec<u8> {
    debug_assert!(events.len() <= PER_MESSAGE);
    let data_len = 4 + events.len() * RECORD;
    let len = HEADER + TEMPLATE_SET + data_len;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&10u16.to_be_bytes());
    m.extend_from_slice(&(len as u16).to_be_bytes());
    m.extend_from_slice(&((time_ms / 1000) as u32).to_be_bytes());
    m.extend_from_slice(&sequence.to_be_bytes());
    m.extend_from_slice(&domain.to_be_bytes());
    // the template set
    m.extend_from_slice(&2u16.to_be_bytes());
    m.extend_from_slice(&(TEMPLATE_SET as u16).to_be_bytes());
    m.extend_from_slice(&TEMPLATE.to_be_bytes());
    m.extend_from_slice(&(FIELDS.len() as u16).to_be_bytes());
    for (id, n) in FIELDS {
        m.extend_from_slice(&id.to_be_bytes());
        m.extend_from_slice(&n.to_be_bytes());
    }
    // the data set
    m.extend_from_slice(&TEMPLATE.to_be_bytes());
    m.extend_from_slice(&(data_len as u16).to_be_bytes());
    for e in events {
        m.extend_from_slice(&time_ms.to_be_bytes());
        m.push(if e.created {
            NAT44_BIB_CREATE
        } else {
            NAT44_BIB_DELETE
        });
        m.push(e.proto);
        m.extend_from_slice(&e.int.0.octets());
        m.extend_from_slice(&e.int.1.to_be_bytes());
        m.extend_from_slice(&e.ext.0.octets());
        m.extend_from_slice(&e.ext.1.to_be_bytes());
    }
    debug_assert_eq!(m.len(), len);
    m
}

/// The records of a message this module wrote (for tests and a collector
/// of last resort): (time ms, event, protocol, inside, outside).
#[allow(clippy::type_complexity)]
pub fn records(m: &[u8]) -> Option<Vec<(u64, u8, u8, (Ipv4Addr, u16), (Ipv4Addr, u16))>> {
    let u16_at = |i: usize| Some(u16::from_be_bytes(m.get(i..i + 2)?.try_into().ok()?));
    if u16_at(0)? != 10 || usize::from(u16_at(2)?) != m.len() {
        return None;
    }
    let mut at = HEADER;
    let mut out = Vec::new();
    while at + 4 <= m.len() {
        let (id, len) = (u16_at(at)?, usize::from(u16_at(at + 2)?));
        if len < 4 || at + len > m.len() {
            return None;
        }
        if id == TEMPLATE {
            for r in m[at + 4..at + len].chunks_exact(RECORD) {
                let ip = |i: usize| Ipv4Addr::new(r[i], r[i + 1], r[i + 2], r[i + 3]);
                let port = |i: usize| u16::from_be_bytes([r[i], r[i + 1]]);
                out.push((
                    u64::from_be_bytes(r[..8].try_into().ok()?),
                    r[8],
                    r[9],
                    (ip(10), port(14)),
                    (ip(16), port(20)),
                ));
            }
        }
        at += len;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_message_fits_and_reads_back() {
        let evs: Vec<NatEvent> = (0..PER_MESSAGE as u16)
            .map(|i| NatEvent {
                created: i % 2 == 0,
                proto: 17,
                int: (Ipv4Addr::new(10, 0, 0, 2), 1000 + i),
                ext: (Ipv4Addr::new(203, 0, 113, 9), 2000 + i),
            })
            .collect();
        let m = message(&evs, 1_700_000_000_123, 42, 7);
        assert!(m.len() <= MAX_MESSAGE, "{}", m.len());
        assert_eq!(&m[..2], &[0, 10]);
        assert_eq!(
            u32::from_be_bytes(m[4..8].try_into().unwrap()),
            1_700_000_000
        );
        assert_eq!(u32::from_be_bytes(m[8..12].try_into().unwrap()), 42);
        let r = records(&m).unwrap();
        assert_eq!(r.len(), evs.len());
        assert_eq!(
            r[1],
            (
                1_700_000_000_123,
                NAT44_BIB_DELETE,
                17,
                (Ipv4Addr::new(10, 0, 0, 2), 1001),
                (Ipv4Addr::new(203, 0, 113, 9), 2001)
            )
        );
        assert_eq!(r[0].1, NAT44_BIB_CREATE);
    }
}
