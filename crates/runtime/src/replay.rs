//! The replay's packets in release order, a chunk at a time: from a trace in
//! memory (chunks are ranges of it) or from a [`trace::Source`] — a capture
//! read as it goes, a trace generated as it goes — that a reader thread
//! keeps a few chunks ahead of the NIC model (of its parsers, of a timed
//! replay), or that the NIC model reads itself at full speed ([`Reader`],
//! [`Chunks::Inline`]). A streamed replay holds those chunks, not the trace,
//! whatever its size; each lap reads the source again from its first packet.
//!
//! Every chunk knows its packets' numbers in the replay, their lap and
//! release times ([`trace::Schedule`]), and the replay's number of its first
//! burst, so that the NIC model's parsers ([`crate::parsers`]) can share the
//! bursts out as they would of a trace in memory.

use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use trace::{Pace, Schedule, Source, Timeline, Trace};

use crate::shared::Shared;

/// Bytes of frames a streamed chunk holds (at least).
pub const CHUNK_BYTES: usize = 1 << 20;
/// Chunks the reader may be ahead of each consumer.
pub const AHEAD: usize = 4;
/// Packets of a chunk of a trace in memory.
const MEMORY_CHUNK: usize = 4096;

/// The packets of a chunk.
enum Frames<'a> {
    /// Packets `start..start + len` of a trace in memory.
    Memory {
        trace: &'a Trace,
        start: usize,
        len: usize,
        schedule: Schedule,
    },
    /// Packets read from a source, with their release offsets (empty at
    /// [`Pace::Max`]).
    Read { trace: Trace, at: Vec<u64> },
}

/// Consecutive packets of the replay, of one lap.
pub(crate) struct Chunk<'a> {
    frames: Frames<'a>,
    /// The replay's number of its first packet (0-based).
    pub first: u64,
    /// The lap its packets belong to (0: the first pass).
    pub lap: u32,
    /// The replay's number of the burst its first packet starts (bursts
    /// start at every chunk).
    pub first_burst: u64,
}

impl Chunk<'_> {
    /// Its packets.
    pub fn len(&self) -> usize {
        match &self.frames {
            Frames::Memory { len, .. } => *len,
            Frames::Read { trace, .. } => trace.len(),
        }
    }

    /// Packet `j`'s frame.
    #[inline]
    pub fn frame(&self, j: usize) -> &[u8] {
        match &self.frames {
            Frames::Memory { trace, start, .. } => trace.frame(start + j),
            Frames::Read { trace, .. } => trace.frame(j),
        }
    }

    /// Packet `j`'s bytes on the wire (FCS included).
    #[inline]
    pub fn wire_len(&self, j: usize) -> u64 {
        let orig = match &self.frames {
            Frames::Memory { trace, start, .. } => trace.orig_len(start + j),
            Frames::Read { trace, .. } => trace.orig_len(j),
        };
        u64::from(orig) + u64::from(trace::FCS_LEN)
    }

    /// When packet `j` is released, ns from the replay's start.
    #[inline]
    pub fn at(&self, j: usize) -> u64 {
        match &self.frames {
            Frames::Memory {
                trace, schedule, ..
            } => schedule
                .release(trace, self.first + j as u64)
                .map_or(0, |(_, at)| at),
            Frames::Read { at, .. } => at.get(j).copied().unwrap_or(0),
        }
    }

    /// Packet `j`'s index in the trace in memory (`None` for a read chunk).
    #[inline]
    pub fn trace_index(&self, j: usize) -> Option<usize> {
        match &self.frames {
            Frames::Memory { start, .. } => Some(start + j),
            Frames::Read { .. } => None,
        }
    }

    /// Bursts of `burst` packets it holds (the last may be short).
    pub fn bursts(&self, burst: usize) -> u64 {
        self.len().div_ceil(burst.max(1)) as u64
    }
}

/// A consumer's chunks, in order.
pub(crate) enum Chunks<'a> {
    /// Cut from a trace in memory as they are taken.
    Memory {
        trace: &'a Trace,
        schedule: Schedule,
        burst: usize,
        /// The next packet's and burst's numbers.
        next: u64,
        next_burst: u64,
    },
    /// From the reader thread.
    Read(Receiver<ReadChunk>),
    /// Read by the consumer itself, when it needs the next.
    Inline(Box<Reader>, &'a Shared),
}

impl<'a> Chunks<'a> {
    /// The chunks of `trace` replayed by `schedule`, bursts of `burst`.
    pub fn memory(trace: &'a Trace, schedule: Schedule, burst: usize) -> Chunks<'a> {
        Chunks::Memory {
            trace,
            schedule,
            burst: burst.max(1),
            next: 0,
            next_burst: 0,
        }
    }

    /// The next chunk; `None` at the end of the replay.
    pub fn next(&mut self) -> Option<Arc<Chunk<'a>>> {
        match self {
            Chunks::Memory {
                trace,
                schedule,
                burst,
                next,
                next_burst,
            } => {
                let len = trace.len() as u64;
                if len == 0 || *next >= schedule.packets(trace) {
                    return None;
                }
                let (lap, start) = (*next / len, (*next % len) as usize);
                let n = MEMORY_CHUNK.min(trace.len() - start);
                let c = Chunk {
                    frames: Frames::Memory {
                        trace,
                        start,
                        len: n,
                        schedule: *schedule,
                    },
                    first: *next,
                    lap: lap as u32,
                    first_burst: *next_burst,
                };
                *next += n as u64;
                *next_burst += c.bursts(*burst);
                Some(Arc::new(c))
            }
            Chunks::Read(rx) => rx.recv().ok(),
            Chunks::Inline(r, shared) => r.next_chunk(shared).map(Arc::new),
        }
    }

    /// What an inline reader read.
    pub fn streamed(&self) -> Option<Streamed> {
        match self {
            Chunks::Inline(r, _) => Some(r.streamed()),
            _ => None,
        }
    }
}

/// What the reader thread read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streamed {
    /// Packets of one pass over the source (those read, if the replay
    /// ended before the first pass did).
    pub packets: u64,
    /// Bytes of frames of one pass.
    pub bytes: u64,
    /// The first pass's replay times: packets stamped back in time, or far
    /// ahead ([`Timeline`]).
    pub timeline: Timeline,
    /// Frames of the first pass cut by a snap length and filled.
    pub filled: u64,
    /// Laps started.
    pub laps: u32,
}

/// A source read lap after lap, `schedule.loops` times, a chunk at a time
/// (bursts of `burst`): what the reader thread, or a consumer reading for
/// itself, runs.
pub(crate) struct Reader {
    source: Box<dyn Source>,
    schedule: Schedule,
    burst: usize,
    st: Streamed,
    lap: u32,
    /// The next chunk's first packet's and burst's numbers.
    first: u64,
    first_burst: u64,
    /// The first pass's first and last replay times, and the laps' period.
    t0: Option<u64>,
    last: u64,
    period: u64,
}

impl Reader {
    /// A reader of `source`.
    pub fn new(source: Box<dyn Source>, schedule: Schedule, burst: usize) -> Reader {
        Reader {
            source,
            schedule,
            burst: burst.max(1),
            st: Streamed {
                laps: 1,
                ..Streamed::default()
            },
            lap: 0,
            first: 0,
            first_burst: 0,
            t0: None,
            last: 0,
            period: 0,
        }
    }

    /// What it read so far.
    pub fn streamed(&self) -> Streamed {
        self.st
    }

    /// The next chunk; `None` at the end of the replay, or when the source
    /// failed (a capture truncated or corrupt halfway: the input ends with
    /// the reason, [`Shared::fail_input`], after the packets before the
    /// fault).
    pub fn next_chunk(&mut self, shared: &Shared) -> Option<Chunk<'static>> {
        loop {
            // (a pcap chunk takes the reader's buffer: nothing to reserve)
            let mut trace = Trace::new();
            let n = match self.source.fill(&mut trace, CHUNK_BYTES) {
                Ok(n) => n,
                Err(e) => {
                    shared.fail_input(e.to_string());
                    return None;
                }
            };
            if n == 0 {
                // the end of a lap
                if self.lap == 0 {
                    if self.st.packets == 0 {
                        return None;
                    }
                    let dur = self.last.saturating_sub(self.t0.unwrap_or(self.last));
                    self.period = trace::replay::lap_period(dur, self.st.packets);
                }
                if self.lap + 1 >= self.schedule.loops {
                    return None;
                }
                if let Err(e) = self.source.rewind() {
                    shared.fail_input(e.to_string());
                    return None;
                }
                self.lap += 1;
                self.st.laps = self.lap + 1;
                continue;
            }
            if self.lap == 0 {
                self.st.packets += n as u64;
                self.st.bytes += trace.data_len() as u64;
                self.st.timeline = self.source.timeline();
                self.st.filled += trace.filled();
                self.last = trace.ts_ns(n - 1);
            }
            let base = *self.t0.get_or_insert(trace.ts_ns(0));
            let (lap, period) = (self.lap, self.period);
            let at = match self.schedule.pace {
                Pace::Max => Vec::new(),
                Pace::Timed { speed } => (0..n)
                    .map(|j| {
                        let since = trace.ts_ns(j).saturating_sub(base);
                        ((u64::from(lap) * period + since) as f64 / speed) as u64
                    })
                    .collect(),
            };
            let c = Chunk {
                frames: Frames::Read { trace, at },
                first: self.first,
                lap,
                first_burst: self.first_burst,
            };
            self.first += n as u64;
            self.first_burst += c.bursts(self.burst);
            return Some(c);
        }
    }
}

/// The reader thread: sends every chunk of `reader` to every consumer, a
/// few chunks ahead of the slowest; it ends when the replay does or every
/// consumer has gone.
pub(crate) fn read(mut reader: Reader, to: Vec<Sender<ReadChunk>>, shared: &Shared) -> Streamed {
    while let Some(c) = reader.next_chunk(shared) {
        let c = Arc::new(c);
        let mut listening = 0;
        for tx in &to {
            if tx.send(c.clone()).is_ok() {
                listening += 1;
            }
        }
        if listening == 0 {
            break;
        }
    }
    reader.streamed()
}

/// A read chunk, shared by every consumer.
pub(crate) type ReadChunk = Arc<Chunk<'static>>;

/// The channels of a streamed replay: one per consumer.
pub(crate) fn channels(consumers: usize) -> (Vec<Sender<ReadChunk>>, Vec<Receiver<ReadChunk>>) {
    (0..consumers)
        .map(|_| crossbeam_channel::bounded(AHEAD))
        .unzip()
}
