//! Where a command's replayed packets come from and how they are held: a
//! capture or the default generated trace, streamed a few MiB at a time
//! (`flowshift run`), or whole in memory — a capture of at most
//! `replay_memory` bytes (its loops then replay from memory), a pre-steered
//! replay, and the commands that need every packet at once (`sim`,
//! `compare`, `validate`). What is held whole is counted against `--memcap`
//! before it is read.

use std::path::{Path, PathBuf};

use anyhow::Context;
use trace::{CaptureFile, CaptureReader, Compression, Generated, Generator, Trace, TraceSpec};

/// Captures of at most this size are read into memory before a run
/// (`replay_memory`'s default).
pub const REPLAY_MEMORY: u64 = 64 << 20;

/// How a command takes its trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Streamed when it can be.
    Stream,
    /// Whole in memory.
    Memory,
}

/// The packets a command replays.
pub enum Packets {
    /// None (a run on interfaces).
    None,
    /// A capture file, streamed.
    File(PathBuf),
    /// The default generated trace, generated as it is replayed.
    Generated(TraceSpec),
    /// A whole trace in memory.
    Memory(Trace),
}

/// The plan before anything is read: what will be held in memory, counted
/// against the cap.
pub struct Plan {
    packets: Packets,
    /// The trace held whole, at most (bytes), and why.
    pub held: Option<runtime::memory::Part>,
    /// Held whole only because it is small (`replay_memory`): it may be
    /// streamed instead.
    small: bool,
}

/// Bytes of a trace in memory per byte of pcap file at most: frames, plus a
/// 24-byte record for each (a pcap record has at least 16 + 14 bytes).
fn in_memory(file_bytes: u64) -> u64 {
    file_bytes + file_bytes.div_ceil(30) * 24
}

/// The bytes of the capture at `p`: its file's length, or a compressed
/// one's decompressed length — counted by a pass through it when the trace
/// is to be held whole (`whole`), else unknown (`u64::MAX`: a compressed
/// capture a replay can stream is streamed).
fn capture_size(p: &Path, whole: bool) -> anyhow::Result<u64> {
    let file = CaptureFile::open(p).with_context(|| format!("{}", p.display()))?;
    match file.compression() {
        Compression::None => Ok(std::fs::metadata(p)
            .with_context(|| format!("{}", p.display()))?
            .len()),
        _ if !whole => Ok(u64::MAX),
        c => {
            eprintln!(
                "flowshift: {}: {}-compressed; counting its size before holding it",
                p.display(),
                c.name()
            );
            CaptureFile::len(p).with_context(|| format!("{}", p.display()))
        }
    }
}

/// The largest frame a generated trace holds (with its record).
const GENERATED_PACKET: u64 = 1_518 + 24;

/// Decides how to hold the packets of `input` (`None`: the default
/// generated trace): `hold` says what the command can take; `presteer`
/// needs the whole trace; a capture of at most `budget` bytes is held whole.
pub fn plan(input: Option<&Path>, hold: Hold, presteer: bool, budget: u64) -> anyhow::Result<Plan> {
    let whole = hold == Hold::Memory || presteer;
    let why = if presteer {
        "the pre-steered trace held whole in memory (`presteer`: its frames and each packet's parse)"
    } else if hold == Hold::Memory {
        "the trace held whole in memory (this command needs every packet at once)"
    } else {
        "the capture held in memory (at most `replay_memory`)"
    };
    let template = if presteer {
        std::mem::size_of::<nf::Packet>() as u64
    } else {
        0
    };
    Ok(match input {
        Some(p) => {
            let size = capture_size(p, whole)?;
            if whole || size <= budget {
                Plan {
                    packets: Packets::File(p.to_path_buf()),
                    held: Some(runtime::memory::Part {
                        what: why,
                        bytes: in_memory(size) + size.div_ceil(30) * template,
                    }),
                    small: !whole,
                }
            } else {
                Plan {
                    packets: Packets::File(p.to_path_buf()),
                    held: None,
                    small: false,
                }
            }
        }
        None => {
            let spec = TraceSpec::default();
            Plan {
                held: whole.then(|| runtime::memory::Part {
                    what: why,
                    bytes: spec.packets * (GENERATED_PACKET + template),
                }),
                small: false,
                packets: Packets::Generated(spec),
            }
        }
    })
}

impl Plan {
    /// An empty plan (a run on interfaces).
    pub fn none() -> Plan {
        Plan {
            packets: Packets::None,
            held: None,
            small: false,
        }
    }

    /// Opens (streamed) or reads (whole) the packets.
    pub fn open(self) -> anyhow::Result<Packets> {
        let whole = self.held.is_some();
        if let Some(h) = self.held.as_ref().filter(|h| h.what.contains("presteer")) {
            eprintln!(
                "flowshift: {}: up to {:.0} MiB",
                h.what,
                h.bytes as f64 / 1048576.0
            );
        }
        Ok(match self.packets {
            Packets::File(p) if whole => match trace::read_pcap(&p) {
                Ok(t) => {
                    warn_read(&p, t.clamped(), t.filled(), t.jumps());
                    Packets::Memory(t)
                }
                // a small capture cut short or corrupt halfway is streamed
                // as a large one is: replayed up to the fault, which then
                // ends the run with its report
                Err(
                    trace::PcapReadError::Truncated { .. } | trace::PcapReadError::Corrupt { .. },
                ) if self.small => {
                    CaptureReader::open(&p)?;
                    Packets::File(p)
                }
                Err(e) => return Err(e.into()),
            },
            Packets::File(p) => {
                // the header now: a file that is no capture fails here
                CaptureReader::open(&p)?;
                Packets::File(p)
            }
            Packets::Generated(spec) if whole => {
                Packets::Memory(Trace::from_generated(Generator::new(&spec)?))
            }
            other => other,
        })
    }
}

impl Packets {
    /// Takes the whole trace out (empty when streamed or none).
    pub fn into_trace(self) -> Trace {
        match self {
            Packets::Memory(t) => t,
            _ => Trace::new(),
        }
    }

    /// What is replayed, for the run's first line.
    pub fn describe(&self) -> String {
        match self {
            Packets::None => String::new(),
            Packets::File(p) => {
                let mib = std::fs::metadata(p).map_or(0.0, |m| m.len() as f64 / 1048576.0);
                let how = CaptureFile::open(p).map_or(Compression::None, |f| f.compression());
                match how {
                    Compression::None => format!("{} ({mib:.1} MiB, streamed)", p.display()),
                    c => format!(
                        "{} ({mib:.1} MiB {}-compressed, streamed)",
                        p.display(),
                        c.name()
                    ),
                }
            }
            Packets::Generated(s) => format!(
                "the default generated trace ({} packets, {} flows, generated as it is replayed)",
                s.packets, s.flows
            ),
            Packets::Memory(t) => format!("{} packets", t.len()),
        }
    }

    /// The runtime's input (`None` for a run on interfaces).
    pub fn input(&self) -> anyhow::Result<Option<runtime::Input<'_>>> {
        Ok(match self {
            Packets::None => None,
            Packets::Memory(t) => Some(runtime::Input::Trace(t)),
            Packets::File(p) => Some(runtime::Input::Stream(Box::new(CaptureReader::open(p)?))),
            Packets::Generated(s) => Some(runtime::Input::Stream(Box::new(Generated::new(s)?))),
        })
    }

    /// Says what a streamed capture's reading found (as [`warn_read`]).
    pub fn warn_streamed(&self, s: Option<&runtime::replay::Streamed>) {
        if let (Packets::File(p), Some(s)) = (self, s) {
            warn_read(p, s.timeline.back, s.filled, s.timeline.jumps);
        }
    }
}

/// Says how many packets of a capture went back in time or jumped ahead
/// (replayed at the previous packet's time), and how many frames were cut
/// by a snap length (filled).
pub fn warn_read(p: &Path, clamped: u64, filled: u64, jumps: u64) {
    if clamped > 0 {
        eprintln!(
            "flowshift: {}: {clamped} packets have a timestamp earlier than the packet before (a merged capture?); they are replayed at the previous packet's time",
            p.display(),
        );
    }
    if filled > 0 {
        eprintln!(
            "flowshift: {}: {filled} frames were cut by the capture's snap length; they are replayed filled to their original length with zeros",
            p.display(),
        );
    }
    if jumps > 0 {
        eprintln!(
            "flowshift: {}: {jumps} packets have a timestamp more than {} s after the packet before (a clock that jumped?); they are replayed at the previous packet's time",
            p.display(),
            trace::MAX_GAP_NS / 1_000_000_000
        );
    }
}
