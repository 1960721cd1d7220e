//! A whole trace in memory ([`Trace`]), and the pcap writer (nanosecond
//! timestamps). Reading either format is `reader`'s; choosing the format by
//! name or first bytes is `capture`'s.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};

pub use crate::formats::{Counted, ParseError, PcapReadError, MAX_RECORD_LEN};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    ts_ns: u64,
    start: usize,
    len: u32,
    orig_len: u32,
}

/// A whole trace in memory: frames back to back in one buffer, plus per-packet
/// timestamps. Cheap to index; what replay and statistics work on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    data: Vec<u8>,
    records: Vec<Record>,
    /// Replay times from the capture's timestamps.
    timeline: crate::Timeline,
    /// Frames cut by a snap length, filled to their original length.
    filled: u64,
}

/// The longest frame a cut one is filled to (an IP packet of 64 KiB and its
/// Ethernet and VLAN headers).
pub const MAX_FILLED: u32 = 65_535 + 18;

impl Trace {
    /// An empty trace.
    pub fn new() -> Trace {
        Trace::default()
    }

    /// Appends a frame (`orig_len` = its length on the wire without FCS),
    /// stamped `ts_ns`. Its time in the trace is its replay time
    /// ([`crate::Timeline`]): a timestamp earlier than the previous packet's
    /// (merged captures have them), or more than a minute after it, is not
    /// followed but counted ([`clamped`](Self::clamped),
    /// [`jumps`](Self::jumps)), so a timed replay never waits on one.
    ///
    /// A frame cut by the capture's snap length (`orig_len` above its bytes:
    /// header-only research traces) is filled to its original length with
    /// zeros (up to [`MAX_FILLED`]) and counted ([`filled`](Self::filled)),
    /// so that it parses and runs as the whole frame would.
    pub fn push(&mut self, ts_ns: u64, frame: &[u8], orig_len: u32) {
        let ts_ns = self.timeline.next(ts_ns);
        let len = frame.len() as u32;
        let whole = if orig_len > len {
            self.filled += 1;
            orig_len.min(MAX_FILLED).max(len)
        } else {
            len
        };
        let data = &mut self.data;
        self.records.push(Record {
            ts_ns,
            start: data.len(),
            len: whole,
            orig_len,
        });
        data.extend_from_slice(frame);
        data.resize(data.len() + (whole - len) as usize, 0);
    }

    /// Takes `data` as the trace's bytes (an empty trace: a chunk read in
    /// place), frames to be added by [`push_within`](Self::push_within).
    pub(crate) fn adopt(&mut self, data: Vec<u8>) {
        debug_assert!(self.records.is_empty());
        self.data = data;
    }

    /// [`push`](Self::push) of a frame already in the trace's bytes, at
    /// `start`, `len` bytes (a frame cut by a snap length is copied to the
    /// end to be filled).
    pub(crate) fn push_within(&mut self, ts_ns: u64, start: usize, len: u32, orig_len: u32) {
        if orig_len > len {
            let frame = self.data[start..start + len as usize].to_vec();
            return self.push(ts_ns, &frame, orig_len);
        }
        let ts_ns = self.timeline.next(ts_ns);
        self.records.push(Record {
            ts_ns,
            start,
            len,
            orig_len,
        });
    }

    /// The replay times so far ([`crate::Timeline`]): a chunk of a capture
    /// read in pieces continues the one before
    /// ([`set_timeline`](Self::set_timeline)).
    pub fn timeline(&self) -> crate::Timeline {
        self.timeline
    }

    /// Continues the replay times from `timeline` (a chunk after another).
    pub fn set_timeline(&mut self, timeline: crate::Timeline) {
        self.timeline = timeline;
    }

    /// Bytes of frames held.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }

    /// Empties the trace, keeping its room (a chunk reused).
    pub fn clear(&mut self) {
        self.data.clear();
        self.records.clear();
        self.timeline = crate::Timeline::default();
        self.filled = 0;
    }

    /// Frames cut by the capture's snap length, filled to their original
    /// length with zeros.
    pub fn filled(&self) -> u64 {
        self.filled
    }

    /// Makes room for `bytes` more bytes of frames.
    pub fn reserve(&mut self, bytes: usize) {
        self.data.reserve(bytes);
    }

    /// Collects generated packets.
    pub fn from_generated(packets: impl IntoIterator<Item = crate::GenPacket>) -> Trace {
        let mut t = Trace::new();
        for p in packets {
            t.push(p.ts_ns, &p.frame, p.frame.len() as u32);
        }
        t
    }

    /// Number of packets.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when there is no packet.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Frame `i` (captured bytes).
    pub fn frame(&self, i: usize) -> &[u8] {
        let r = &self.records[i];
        &self.data[r.start..r.start + r.len as usize]
    }

    /// Timestamp of packet `i` in ns since the epoch.
    pub fn ts_ns(&self, i: usize) -> u64 {
        self.records[i].ts_ns
    }

    /// Length of packet `i` on the wire without FCS (may exceed the captured bytes).
    pub fn orig_len(&self, i: usize) -> u32 {
        self.records[i].orig_len
    }

    /// Iterates `(timestamp, frame)`.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u64, &[u8])> + '_ {
        (0..self.len()).map(|i| (self.ts_ns(i), self.frame(i)))
    }

    /// Packets whose timestamp was earlier than the previous packet's when
    /// read, replayed at the previous packet's time.
    pub fn clamped(&self) -> u64 {
        self.timeline.back
    }

    /// Packets whose timestamp was more than [`crate::MAX_GAP_NS`] after the
    /// previous packet's when read, replayed at the previous packet's time.
    pub fn jumps(&self) -> u64 {
        self.timeline.jumps
    }

    /// Time from the first to the last packet, in ns.
    pub fn duration_ns(&self) -> u64 {
        match (self.records.first(), self.records.last()) {
            (Some(a), Some(b)) => b.ts_ns.saturating_sub(a.ts_ns),
            _ => 0,
        }
    }
}

/// Writes packets to a nanosecond-resolution Ethernet pcap; returns the count.
pub fn write_pcap<B: AsRef<[u8]>>(
    path: &Path,
    packets: impl IntoIterator<Item = (u64, B)>,
) -> Result<u64, std::io::Error> {
    let file = fs::File::create(path)?;
    let mut w = write_pcap_to(BufWriter::with_capacity(1 << 20, file), packets)?;
    w.flush()?;
    Ok(w.count)
}

fn io(e: PcapError) -> std::io::Error {
    match e {
        PcapError::IoError(e) => e,
        other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
    }
}

/// Writes a pcap to any writer.
pub fn write_pcap_to<W: Write, B: AsRef<[u8]>>(
    out: W,
    packets: impl IntoIterator<Item = (u64, B)>,
) -> Result<Counted<W>, std::io::Error> {
    let header = PcapHeader {
        version_major: 2,
        version_minor: 4,
        ts_correction: 0,
        ts_accuracy: 0,
        // as tcpdump: frames above 64 KiB (jumbo, reassembled, GRO) fit
        snaplen: MAX_RECORD_LEN,
        datalink: DataLink::ETHERNET,
        ts_resolution: TsResolution::NanoSecond,
        endianness: Endianness::Little,
    };
    let mut w = PcapWriter::with_header(out, header).map_err(io)?;
    let mut count = 0;
    for (ts, frame) in packets {
        let frame = frame.as_ref();
        // what no reader takes is cut to the snap length, its length kept
        let kept = &frame[..frame.len().min(MAX_RECORD_LEN as usize)];
        let p = PcapPacket::new(Duration::from_nanos(ts), frame.len() as u32, kept);
        w.write_packet(&p).map_err(io)?;
        count += 1;
    }
    Ok(Counted::new(w.into_writer(), count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::parse_pcap;

    fn sample() -> Vec<u8> {
        let frames: Vec<(u64, Vec<u8>)> = (0..3)
            .map(|i| (1_000_000_007 * (i + 1), vec![i as u8; 60 + i as usize]))
            .collect();
        let w = write_pcap_to(Vec::new(), frames.iter().map(|(t, f)| (*t, &f[..]))).unwrap();
        w.into_inner()
    }

    #[test]
    fn round_trip_keeps_nanoseconds() {
        let t = parse_pcap(&sample()).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.ts_ns(2), 3_000_000_021);
        assert_eq!(t.frame(1), &[1u8; 61][..]);
        assert_eq!(t.duration_ns(), 2_000_000_014);
    }

    #[test]
    fn truncation_names_the_offset() {
        let b = sample();
        // file header 24, record 0 = 16 + 60 = 76 → record 1 starts at 100
        match parse_pcap(&b[..120]) {
            Err(ParseError::Truncated(100, "a record", 77, 20)) => {}
            other => panic!("{other:?}"),
        }
        match parse_pcap(&b[..105]) {
            Err(ParseError::Truncated(100, "a record header", 16, 5)) => {}
            other => panic!("{other:?}"),
        }
        match parse_pcap(&b[..10]) {
            Err(ParseError::Truncated(0, "the file header", 24, 10)) => {}
            other => panic!("{other:?}"),
        }
        let e = parse_pcap(&b[..120]).unwrap_err().at(Path::new("x.pcap"));
        assert_eq!(
            e.to_string(),
            "x.pcap: truncated at byte offset 100: a record needs 77 bytes, 20 left"
        );
    }

    #[test]
    fn corruption_names_the_offset() {
        let mut b = sample();
        b[100 + 8..100 + 12].copy_from_slice(&0x00ff_ffffu32.to_le_bytes());
        match parse_pcap(&b) {
            Err(ParseError::Corrupt(100, what)) => {
                assert!(what.contains("captured bytes"), "{what}")
            }
            other => panic!("{other:?}"),
        }
        let mut b = sample();
        b[0] = 0;
        assert!(matches!(parse_pcap(&b), Err(ParseError::Corrupt(0, _))));
        let mut b = sample();
        b[20] = 101; // raw IP link type
        assert!(matches!(parse_pcap(&b), Err(ParseError::LinkType(_))));
    }
}
