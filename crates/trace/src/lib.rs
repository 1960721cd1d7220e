//! Traces: generate them from a [`TraceSpec`], write and read pcap files, summarise
//! them ([`TraceStats`]), and compute replay release times ([`Schedule`]).
//!
//! Generation is pure and deterministic: the same spec (seed included) gives the
//! same packets, byte for byte. Only [`pcap`] touches files.
//!
//! Every generated packet carries a per-connection sequence tag ([`wire::seqtag`])
//! at the start of its L4 payload so that reordering can be measured downstream.

mod fenwick;
pub mod gen;
pub mod pcap;
pub mod replay;
pub mod spec;
pub mod stats;
pub mod tshark;
mod zipf;

pub use gen::{GenPacket, GenSummary, Generator};
pub use pcap::{read_pcap, write_pcap, PcapReadError, Trace};
pub use replay::{Pace, Schedule};
pub use spec::{Arrival, Rate, SizeDist, SpecError, TraceSpec};
pub use stats::TraceStats;

/// Bytes of Ethernet FCS that a pcap record omits but the wire carries. flowshift
/// counts frame sizes and bit rates on the wire frame (FCS included; preamble and
/// inter-frame gap excluded), so a "64 B packet" is a 60-byte pcap record.
pub const FCS_LEN: u32 = 4;
