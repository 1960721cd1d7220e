//! Capture files of either format: written as pcap, or pcapng when the name
//! ends in `.pcapng`; read whole into memory as pcap or pcapng, told apart by
//! their first bytes ([`crate::CaptureReader`] run to the end).

use std::fs;
use std::io::BufWriter;
use std::path::Path;

use crate::formats::{ParseError, PcapReadError};
use crate::pcap::{write_pcap, Trace};

/// Writes packets to `path`: pcapng when its name ends in `.pcapng`, pcap
/// otherwise (both with nanosecond timestamps); returns the count.
pub fn write_capture<B: AsRef<[u8]>>(
    path: &Path,
    packets: impl IntoIterator<Item = (u64, B)>,
) -> Result<u64, std::io::Error> {
    let ng = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("pcapng"));
    if !ng {
        return write_pcap(path, packets);
    }
    let file = fs::File::create(path)?;
    let out = BufWriter::with_capacity(1 << 20, file);
    let mut w = crate::pcapng::write_pcapng_to(out, packets)?;
    w.flush()?;
    Ok(w.count)
}

/// Reads a whole capture file — pcap or pcapng, told apart by their first
/// bytes — into memory ([`crate::CaptureReader`] run to the end).
pub fn read_pcap(path: &Path) -> Result<Trace, PcapReadError> {
    crate::CaptureReader::open(path)?.read_all()
}

/// Parses a capture already in memory: pcapng if it starts with a Section
/// Header Block, pcap otherwise.
pub fn parse_capture(bytes: &[u8]) -> Result<Trace, ParseError> {
    let mut r = crate::CaptureReader::new(bytes, Path::new(""));
    let mut t = Trace::new();
    while r.fill_raw(&mut t, usize::MAX)? > 0 {}
    Ok(t)
}

/// Parses pcap bytes (the file already in memory).
pub fn parse_pcap(bytes: &[u8]) -> Result<Trace, ParseError> {
    parse_capture(bytes)
}

/// Parses pcapng bytes (the file already in memory).
pub fn parse_pcapng(bytes: &[u8]) -> Result<Trace, ParseError> {
    parse_capture(bytes)
}
