//! pcapng files — what Wireshark, tshark and dumpcap write by default: read them
//! into a [`Trace`] (every section, every Ethernet interface, each interface's
//! timestamp resolution and offset) and write them (one Ethernet interface with
//! nanosecond timestamps). Errors name the byte offset, as for pcap.

use std::io::Write;
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, PcapError};

use crate::formats::{Counted, ParseError, MAX_RECORD_LEN};
use crate::Trace;

/// The first four bytes of a pcapng file (a Section Header Block's type).
pub const MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// How one interface's timestamps read: units per second and an offset.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    /// Timestamp units per second.
    per_sec: u128,
    /// Seconds added to every timestamp (`if_tsoffset`).
    offset_s: u64,
}

impl Clock {
    pub(crate) fn of(idb: &InterfaceDescriptionBlock) -> Result<Clock, String> {
        let mut c = Clock {
            per_sec: 1_000_000, // no if_tsresol: microseconds
            offset_s: 0,
        };
        for o in &idb.options {
            match o {
                InterfaceDescriptionOption::IfTsResol(r) => {
                    let (base, exp) = if r & 0x80 == 0 {
                        (10u128, u32::from(*r))
                    } else {
                        (2u128, u32::from(r & 0x7f))
                    };
                    c.per_sec = base
                        .checked_pow(exp)
                        .filter(|v| *v > 0 && *v <= 1_000_000_000_000_000_000)
                        .ok_or_else(|| {
                            format!("interface timestamp resolution {r:#x} is absurd")
                        })?;
                }
                InterfaceDescriptionOption::IfTsOffset(s) => c.offset_s = *s,
                _ => {}
            }
        }
        Ok(c)
    }

    /// Nanoseconds since the epoch of a raw timestamp (the parser hands the raw
    /// 64-bit count as `Duration::from_nanos`).
    pub(crate) fn ns(&self, raw: Duration) -> u64 {
        let units = raw.as_nanos();
        let ns = units * 1_000_000_000 / self.per_sec + u128::from(self.offset_s) * 1_000_000_000;
        ns.min(u128::from(u64::MAX)) as u64
    }
}

/// The clock of interface `id`, or why its packets cannot be read.
pub(crate) fn interface(
    clocks: &[Result<Clock, ParseError>],
    id: u32,
    offset: u64,
) -> Result<Clock, ParseError> {
    match clocks.get(id as usize) {
        Some(Ok(c)) => Ok(*c),
        Some(Err(ParseError::LinkType(l))) => Err(ParseError::LinkType(*l)),
        Some(Err(ParseError::Corrupt(o, w))) => Err(ParseError::Corrupt(*o, w.clone())),
        Some(Err(_)) => Err(ParseError::Corrupt(offset, "bad interface".into())),
        None => Err(ParseError::Corrupt(
            offset,
            format!("packet of interface {id}, which no interface block describes"),
        )),
    }
}

pub(crate) fn record(
    trace: &mut Trace,
    offset: u64,
    ts_ns: u64,
    data: &[u8],
    orig_len: u32,
) -> Result<(), ParseError> {
    if data.len() > MAX_RECORD_LEN as usize {
        return Err(ParseError::Corrupt(
            offset,
            format!(
                "packet of {} captured bytes, more than the limit {MAX_RECORD_LEN}",
                data.len()
            ),
        ));
    }
    // a snap length cuts the captured bytes, never the original length: a
    // smaller original length is read as the captured one
    trace.push(ts_ns, data, orig_len.max(data.len() as u32));
    Ok(())
}

/// A block that could not be parsed, as a truncation (with what it needs) or a
/// corruption at `offset`.
pub(crate) fn block_error(e: PcapError, offset: u64, rest: &[u8]) -> ParseError {
    match e {
        PcapError::IncompleteBuffer => {
            let need = rest
                .get(4..8)
                .map(|b| {
                    let le = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    let be = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                    u64::from(le.min(be))
                })
                .unwrap_or(12);
            ParseError::Truncated(offset, "a block", need.max(12), rest.len() as u64)
        }
        other => ParseError::Corrupt(offset, format!("block: {other}")),
    }
}

/// Writes a pcapng (one Ethernet interface, nanosecond timestamps) to any
/// writer.
pub fn write_pcapng_to<W: Write, B: AsRef<[u8]>>(
    out: W,
    packets: impl IntoIterator<Item = (u64, B)>,
) -> Result<Counted<W>, std::io::Error> {
    let io = |e: PcapError| match e {
        PcapError::IoError(e) => e,
        other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
    };
    let mut w = PcapNgWriter::new(out).map_err(io)?;
    let idb = InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: 0,
        options: vec![InterfaceDescriptionOption::IfTsResol(9)],
    };
    w.write_pcapng_block(idb).map_err(io)?;
    let mut count = 0;
    for (ts, frame) in packets {
        let frame = frame.as_ref();
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::from_nanos(ts),
            original_len: frame.len() as u32,
            data: frame.into(),
            options: vec![],
        };
        w.write_pcapng_block(epb).map_err(io)?;
        count += 1;
    }
    Ok(Counted::new(w.into_inner(), count))
}
