//! A capture read as it goes: pcap or pcapng (told apart by their first
//! bytes) from any reader, a few MiB at a time, into chunks of frames
//! ([`Trace`]s) — so a capture of any size replays in bounded memory. The
//! whole-file readers ([`crate::read_pcap`], [`crate::parse_capture`]) are
//! this reader run to the end. Errors name the byte offset, wherever in the
//! file they are found (in a compressed capture, [`CaptureFile`], the
//! offset in its decompressed bytes).

use std::io::Read;
use std::path::{Path, PathBuf};

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};

use crate::pcap::{ParseError, PcapReadError, MAX_RECORD_LEN};
use crate::pcapng::{block_error, interface, record, Clock, MAGIC};
use crate::{CaptureFile, Compression, Timeline, Trace};

/// Bytes read from the file at a time.
const READ: usize = 1 << 20;
const FILE_HEADER_LEN: usize = 24;
const RECORD_HEADER_LEN: usize = 16;

/// Where the reader is in the file's structure.
enum Format {
    /// Before the file header.
    Start,
    /// A pcap file's records.
    Pcap {
        endianness: Endianness,
        resolution: TsResolution,
    },
    /// A pcapng file's blocks: the section's parser, its interfaces' clocks
    /// (or why their packets cannot be read), the last timestamp (a Simple
    /// Packet Block has none).
    Ng {
        parser: Box<PcapNgParser>,
        clocks: Vec<Result<Clock, ParseError>>,
        last_ts: u64,
    },
}

/// A capture read a chunk at a time from `R`.
pub struct CaptureReader<R> {
    src: R,
    path: PathBuf,
    /// Bytes read and not yet parsed start at `buf[pos]`; `buf[0]` is at
    /// file offset `base`.
    buf: Vec<u8>,
    pos: usize,
    base: u64,
    eof: bool,
    format: Format,
    /// Replay times of the packets read so far.
    timeline: Timeline,
    /// Packets read (this pass).
    packets: u64,
    /// An error found after a chunk's first packets: returned by the next
    /// fill, so that the packets before it are not lost.
    pending: Option<ParseError>,
    /// A read that failed after handing over some bytes (a compressed file
    /// cut short or corrupt): the bytes before it are parsed first, then it
    /// is the capture's end.
    broken: Option<std::io::Error>,
}

impl CaptureReader<CaptureFile> {
    /// Opens a capture file — plain, gzip- or zstd-compressed — and reads
    /// its header (a file that is no capture fails here).
    pub fn open(path: &Path) -> Result<CaptureReader<CaptureFile>, PcapReadError> {
        let f = CaptureFile::open(path).map_err(|source| PcapReadError::Io {
            path: path.into(),
            source,
        })?;
        let mut r = CaptureReader::new(f, path);
        r.header().map_err(|e| e.at(path))?;
        Ok(r)
    }

    /// How the file is compressed.
    pub fn compression(&self) -> Compression {
        self.src.compression()
    }

    /// Back to the first packet (another pass over the file).
    pub fn rewind(&mut self) -> Result<(), PcapReadError> {
        self.src.rewind().map_err(|source| PcapReadError::Io {
            path: self.path.clone(),
            source,
        })?;
        self.restart();
        Ok(())
    }
}

impl<R: Read> CaptureReader<R> {
    /// A reader of the capture in `src`; `path` names it in errors.
    pub fn new(src: R, path: &Path) -> CaptureReader<R> {
        CaptureReader {
            src,
            path: path.into(),
            buf: Vec::new(),
            pos: 0,
            base: 0,
            eof: false,
            format: Format::Start,
            timeline: Timeline::default(),
            packets: 0,
            pending: None,
            broken: None,
        }
    }

    fn restart(&mut self) {
        self.buf.clear();
        self.pos = 0;
        self.base = 0;
        self.eof = false;
        self.format = Format::Start;
        self.timeline = Timeline::default();
        self.packets = 0;
        self.pending = None;
        self.broken = None;
    }

    /// The replay times of the packets read so far: how many were stamped
    /// back in time or far ahead ([`Timeline`]).
    pub fn timeline(&self) -> Timeline {
        self.timeline
    }

    /// Packets read since the start (or the last rewind).
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Appends packets to `chunk` until it holds at least `bytes` bytes of
    /// frames or the capture ends; returns how many it appended (0: the end).
    /// The chunk's replay times continue the capture's. A capture that turns
    /// out truncated or corrupt gives its packets up to the fault first, then
    /// the error.
    pub fn fill(&mut self, chunk: &mut Trace, bytes: usize) -> Result<usize, PcapReadError> {
        self.fill_raw(chunk, bytes).map_err(|e| e.at(&self.path))
    }

    /// Reads the rest of the capture into one trace.
    pub fn read_all(mut self) -> Result<Trace, PcapReadError> {
        let mut t = Trace::new();
        while self.fill(&mut t, usize::MAX)? > 0 {}
        Ok(t)
    }

    pub(crate) fn fill_raw(
        &mut self,
        chunk: &mut Trace,
        bytes: usize,
    ) -> Result<usize, ParseError> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        chunk.set_timeline(self.timeline);
        let before = chunk.len();
        if matches!(self.format, Format::Start) {
            self.header()?;
        }
        let mut fault = None;
        // a pcap chunk is read in place, a buffer's worth (a frame copied
        // after it would copy the whole buffer to make room)
        let in_place =
            chunk.is_empty() && chunk.data_len() == 0 && matches!(self.format, Format::Pcap { .. });
        if in_place {
            if let Err(e) = self.pcap_in_place(chunk, bytes) {
                fault = Some(e);
            }
        }
        while !(in_place && chunk.len() > before) && fault.is_none() && chunk.data_len() < bytes {
            let more = match self.format {
                Format::Pcap { .. } => self.pcap_record(chunk),
                Format::Ng { .. } => self.ng_block(chunk),
                Format::Start => unreachable!("the header is read first"),
            };
            match more {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    fault = Some(e);
                    break;
                }
            }
        }
        self.timeline = chunk.timeline();
        let n = chunk.len() - before;
        // the capture's end, or a record cut short, came from a failed read:
        // that failure is the error
        let at_end = match fault {
            None => n == 0,
            Some(ParseError::Truncated(..)) => true,
            Some(_) => false,
        };
        if at_end && self.broken.is_some() {
            fault = self.broken.take().map(ParseError::Io);
        }
        self.packets += n as u64;
        match fault {
            Some(e) if n == 0 => Err(e),
            Some(e) => {
                self.pending = Some(e);
                Ok(n)
            }
            None => Ok(n),
        }
    }

    /// Unparsed bytes.
    fn avail(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The file offset of the next unparsed byte.
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Reads until at least `need` bytes are unparsed, or the file ends;
    /// true when they are.
    fn want(&mut self, need: usize) -> Result<bool, ParseError> {
        self.want_at_least(need, READ)
    }

    /// [`want`](Self::want), reading at least `least` bytes a time.
    fn want_at_least(&mut self, need: usize, least: usize) -> Result<bool, ParseError> {
        while self.avail() < need && !self.eof {
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.base += self.pos as u64;
                self.pos = 0;
            }
            let grow = need.saturating_sub(self.buf.len()).max(least);
            // room for it at once (a buffer that grows as it is read would
            // be copied): up to 64 MiB, then by doubling
            self.buf.reserve(grow.min(64 << 20));
            // (appended as read: no zeroing first)
            let before = self.buf.len();
            match (&mut self.src).take(grow as u64).read_to_end(&mut self.buf) {
                Ok(got) if got < grow => self.eof = true,
                Ok(_) => {}
                Err(e) if self.buf.len() == before => return Err(ParseError::Io(e)),
                // (what was read before the failure is kept and parsed)
                Err(e) => {
                    self.broken = Some(e);
                    self.eof = true;
                }
            }
        }
        Ok(self.avail() >= need)
    }

    fn header(&mut self) -> Result<(), ParseError> {
        self.want(FILE_HEADER_LEN)?;
        let head = &self.buf[self.pos..];
        if head.starts_with(&MAGIC) {
            let (used, parser) = loop {
                let head = &self.buf[self.pos..];
                match PcapNgParser::new(head) {
                    Ok((rest, parser)) => break (head.len() - rest.len(), parser),
                    Err(PcapError::IncompleteBuffer) if !self.eof => {
                        let need = self.avail() + READ;
                        self.want(need)?;
                    }
                    Err(e) => return Err(block_error(e, 0, head)),
                }
            };
            self.pos += used;
            self.format = Format::Ng {
                parser: Box::new(parser),
                clocks: Vec::new(),
                last_ts: 0,
            };
            return Ok(());
        }
        let (rest, parser) = match PcapParser::new(head) {
            Ok(ok) => ok,
            Err(PcapError::IncompleteBuffer) => {
                return Err(ParseError::Truncated(
                    0,
                    "the file header",
                    FILE_HEADER_LEN as u64,
                    head.len() as u64,
                ))
            }
            Err(e) => {
                return Err(ParseError::Corrupt(
                    0,
                    format!("file header: {e} (neither a pcap nor a pcapng file)"),
                ))
            }
        };
        let h = parser.header();
        if h.datalink != DataLink::ETHERNET {
            return Err(ParseError::LinkType(h.datalink));
        }
        self.pos += head.len() - rest.len();
        self.format = Format::Pcap {
            endianness: h.endianness,
            resolution: h.ts_resolution,
        };
        Ok(())
    }

    /// A pcap file's byte order and timestamp resolution.
    fn pcap(&self) -> (Endianness, TsResolution) {
        match self.format {
            Format::Pcap {
                endianness,
                resolution,
            } => (endianness, resolution),
            _ => unreachable!("a pcap file"),
        }
    }

    /// Reads at least `bytes` of pcap records (or up to the end of the file)
    /// into an empty `chunk` without copying them: the chunk takes the read
    /// buffer, its records pointing at the frames in it, and the partial
    /// record at its end starts the next buffer.
    fn pcap_in_place(&mut self, chunk: &mut Trace, bytes: usize) -> Result<(), ParseError> {
        let (endianness, resolution) = self.pcap();
        // (a chunk's worth: what is read past it is copied to the next buffer)
        self.want_at_least(bytes.saturating_add(RECORD_HEADER_LEN), 0)?;
        let mut buf = std::mem::take(&mut self.buf);
        let mut at = self.pos;
        let mut fault = None;
        let mut frames = Vec::new();
        while buf.len() - at >= RECORD_HEADER_LEN && at - self.pos < bytes {
            let h =
                match RecordHeader::read(&buf[at..], endianness, resolution, self.base + at as u64)
                {
                    Ok(h) => h,
                    Err(e) => {
                        fault = Some(e);
                        break;
                    }
                };
            if buf.len() - at < h.whole() {
                break;
            }
            frames.push((h.ts_ns, at + RECORD_HEADER_LEN, h.incl, h.orig));
            at += h.whole();
        }
        // the rest (a partial record, or what a fault left) starts the next
        // buffer
        // (room for the next chunk at once: a grown buffer would be copied
        // whole)
        let room = bytes.saturating_add(RECORD_HEADER_LEN).min(64 << 20);
        self.buf = Vec::with_capacity(room.max(buf.len() - at));
        self.buf.extend_from_slice(&buf[at..]);
        self.base += at as u64;
        self.pos = 0;
        buf.truncate(at);
        chunk.adopt(buf);
        for (ts, start, len, orig) in frames {
            chunk.push_within(ts, start, len, orig);
        }
        match fault {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Reads one pcap record into `chunk`; false at the end of the file.
    fn pcap_record(&mut self, chunk: &mut Trace) -> Result<bool, ParseError> {
        let (endianness, resolution) = self.pcap();
        if !self.want(RECORD_HEADER_LEN)? {
            if self.avail() == 0 {
                return Ok(false);
            }
            return Err(ParseError::Truncated(
                self.offset(),
                "a record header",
                RECORD_HEADER_LEN as u64,
                self.avail() as u64,
            ));
        }
        let h = RecordHeader::read(&self.buf[self.pos..], endianness, resolution, self.offset())?;
        let whole = h.whole();
        if !self.want(whole)? {
            return Err(ParseError::Truncated(
                self.offset(),
                "a record",
                whole as u64,
                self.avail() as u64,
            ));
        }
        let rec = &self.buf[self.pos..self.pos + whole];
        chunk.push(h.ts_ns, &rec[RECORD_HEADER_LEN..], h.orig);
        self.pos += whole;
        Ok(true)
    }

    /// Reads one pcapng block (a packet into `chunk`, or what says how to
    /// read the packets); false at the end of the file.
    fn ng_block(&mut self, chunk: &mut Trace) -> Result<bool, ParseError> {
        loop {
            if self.avail() == 0 && !self.want(1)? {
                return Ok(false);
            }
            let offset = self.offset();
            let Format::Ng {
                parser,
                clocks,
                last_ts,
            } = &mut self.format
            else {
                unreachable!("a pcapng file")
            };
            let rest = &self.buf[self.pos..];
            let (r, block) = match parser.next_block(rest) {
                Ok(ok) => ok,
                Err(PcapError::IncompleteBuffer) if !self.eof => {
                    let need = self.avail() + READ;
                    self.want(need)?;
                    continue;
                }
                Err(e) => return Err(block_error(e, offset, rest)),
            };
            let mut packet = false;
            match block {
                Block::SectionHeader(_) => clocks.clear(),
                Block::InterfaceDescription(idb) => {
                    clocks.push(if idb.linktype != DataLink::ETHERNET {
                        Err(ParseError::LinkType(idb.linktype))
                    } else {
                        Clock::of(&idb).map_err(|w| ParseError::Corrupt(offset, w))
                    })
                }
                Block::EnhancedPacket(p) => {
                    let clock = interface(clocks, p.interface_id, offset)?;
                    *last_ts = clock.ns(p.timestamp);
                    record(chunk, offset, *last_ts, &p.data, p.original_len)?;
                    packet = true;
                }
                Block::Packet(p) => {
                    let clock = interface(clocks, u32::from(p.interface_id), offset)?;
                    *last_ts = clock.ns(std::time::Duration::from_nanos(p.timestamp));
                    record(chunk, offset, *last_ts, &p.data, p.original_len)?;
                    packet = true;
                }
                Block::SimplePacket(p) => {
                    // interface 0, no timestamp: it follows the packet before
                    interface(clocks, 0, offset)?;
                    record(chunk, offset, *last_ts, &p.data, p.original_len)?;
                    packet = true;
                }
                // statistics, name resolution, journal entries, unknown blocks
                _ => {}
            }
            self.pos += rest.len() - r.len();
            if packet {
                return Ok(true);
            }
        }
    }
}

/// A pcap record's header, read by hand: a capture cut by a snap length has
/// an original length above the captured one, which is legal (the frame is
/// cut), and a record longer than the file's snap length is read as it is
/// (as tshark does: writers that cut frames do not always say so).
struct RecordHeader {
    ts_ns: u64,
    /// Captured bytes.
    incl: u32,
    /// Bytes on the wire (a smaller original length is read as the
    /// captured one).
    orig: u32,
}

impl RecordHeader {
    /// The header at the start of `rec` (at least 16 bytes), at file offset
    /// `offset`.
    fn read(
        rec: &[u8],
        e: Endianness,
        resolution: TsResolution,
        offset: u64,
    ) -> Result<RecordHeader, ParseError> {
        let incl = read_u32(&rec[8..12], e);
        if incl > MAX_RECORD_LEN {
            return Err(ParseError::Corrupt(
                offset,
                format!(
                    "record claims {incl} captured bytes, more than the limit {MAX_RECORD_LEN}"
                ),
            ));
        }
        let sec = u64::from(read_u32(&rec[0..4], e));
        let frac = u64::from(read_u32(&rec[4..8], e));
        let frac_ns = match resolution {
            TsResolution::MicroSecond => frac.saturating_mul(1_000),
            TsResolution::NanoSecond => frac,
        };
        Ok(RecordHeader {
            ts_ns: sec.saturating_mul(1_000_000_000).saturating_add(frac_ns),
            incl,
            orig: read_u32(&rec[12..16], e).max(incl),
        })
    }

    /// The record's bytes, header included.
    fn whole(&self) -> usize {
        RECORD_HEADER_LEN + self.incl as usize
    }
}

fn read_u32(b: &[u8], e: Endianness) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    match e {
        Endianness::Big => u32::from_be_bytes(a),
        Endianness::Little => u32::from_le_bytes(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out at most `step` bytes a call.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(self.1).min(out.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn frames(n: usize) -> Vec<(u64, Vec<u8>)> {
        (0..n)
            .map(|i| (1_000 * i as u64 + 5, vec![i as u8; 60 + i % 1500]))
            .collect()
    }

    fn capture(ng: bool, n: usize) -> Vec<u8> {
        let f = frames(n);
        let it = f.iter().map(|(t, x)| (*t, &x[..]));
        if ng {
            crate::pcapng::write_pcapng_to(Vec::new(), it)
                .unwrap()
                .into_inner()
        } else {
            crate::pcap::write_pcap_to(Vec::new(), it)
                .unwrap()
                .into_inner()
        }
    }

    #[test]
    fn chunks_read_in_small_pieces_are_the_whole_file() {
        for ng in [false, true] {
            let bytes = capture(ng, 3_000);
            let whole = crate::parse_capture(&bytes).unwrap();
            let mut r = CaptureReader::new(Trickle(&bytes, 777), Path::new("t"));
            let mut got = Vec::new();
            loop {
                let mut c = Trace::new();
                let n = r.fill(&mut c, 64 << 10).unwrap();
                if n == 0 {
                    break;
                }
                let frames: usize = (0..c.len()).map(|j| c.frame(j).len()).sum();
                assert!(
                    frames < (64 << 10) + 1600,
                    "a chunk stops at its size: {frames}"
                );
                got.extend((0..c.len()).map(|i| (c.ts_ns(i), c.frame(i).to_vec())));
            }
            assert_eq!(got.len(), whole.len(), "ng {ng}");
            assert_eq!(r.packets(), 3_000);
            for (i, (ts, f)) in got.iter().enumerate() {
                assert_eq!((*ts, &f[..]), (whole.ts_ns(i), whole.frame(i)), "ng {ng}");
            }
        }
    }

    #[test]
    fn truncation_is_found_where_it_is_and_after_the_packets_before() {
        for ng in [false, true] {
            let bytes = capture(ng, 200);
            let cut = &bytes[..bytes.len() - 30];
            let mut r = CaptureReader::new(Trickle(cut, 4096), Path::new("cut.pcap"));
            let mut read = 0;
            let err = loop {
                let mut c = Trace::new();
                match r.fill(&mut c, 8 << 10) {
                    Ok(0) => panic!("a truncated capture reads to its end"),
                    Ok(n) => read += n,
                    Err(e) => break e,
                }
            };
            assert_eq!(read, 199, "ng {ng}: every whole packet first");
            let msg = err.to_string();
            assert!(
                msg.starts_with("cut.pcap: truncated at byte offset"),
                "{msg}"
            );
        }
    }
}
