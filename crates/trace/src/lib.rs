//! Traces: generate them from a [`TraceSpec`], write and read pcap files, summarise
//! them ([`TraceStats`]), and compute replay release times ([`Schedule`]).
//!
//! Generation is pure and deterministic: the same spec (seed included) gives the
//! same packets, byte for byte. Only [`pcap`] touches files.
//!
//! Every generated packet carries a per-connection sequence tag ([`wire::seqtag`])
//! at the start of its L4 payload so that reordering can be measured downstream.
//!
//! ```
//! use trace::{Generator, Trace, TraceSpec};
//!
//! let spec = TraceSpec { flows: 100, packets: 2_000, seed: 7, ..TraceSpec::default() };
//! let trace = Trace::from_generated(Generator::new(&spec).unwrap());
//! assert_eq!(trace.len(), 2_000);
//! // same spec, same packets
//! let again = Trace::from_generated(Generator::new(&spec).unwrap());
//! assert_eq!(trace.frame(42), again.frame(42));
//! ```

#![forbid(unsafe_code)]

pub mod capture;
pub mod compressed;
mod fenwick;
mod formats;
pub mod gen;
pub mod gtp;
pub mod pcap;
pub mod pcapng;
pub mod reader;
pub mod replay;
pub mod source;
pub mod spec;
pub mod stats;
pub mod timeline;
pub mod tshark;
mod zipf;

pub use capture::{parse_capture, read_pcap, write_capture};
pub use compressed::{CaptureFile, Compression};
pub use gen::{GenPacket, GenSummary, Generator};
pub use pcap::{write_pcap, PcapReadError, Trace};
pub use reader::CaptureReader;
pub use replay::{Pace, Schedule};
pub use source::{Generated, Source};
pub use spec::{Arrival, Lifetimes, Rate, SizeDist, SpecError, TraceSpec, MAX_FLOWS, MAX_PACKETS};
pub use stats::{StatsBuilder, TraceStats};
pub use timeline::{Timeline, MAX_GAP_NS};

/// Bytes of Ethernet FCS that a pcap record omits but the wire carries. flowshift
/// counts frame sizes and bit rates on the wire frame (FCS included; preamble and
/// inter-frame gap excluded), so a "64 B packet" is a 60-byte pcap record.
pub const FCS_LEN: u32 = 4;
