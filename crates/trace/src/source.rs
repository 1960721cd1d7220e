//! Where a replay's packets come from, a chunk at a time and again from the
//! first for every lap: a capture file read as it goes
//! ([`CaptureReader`]), a trace generated as it goes ([`Generated`]), or a
//! trace already in memory. A replay of any of them holds a few chunks, not
//! the trace.

use crate::{
    CaptureFile, CaptureReader, GenPacket, Generator, PcapReadError, Timeline, Trace, TraceSpec,
};

/// Packets from their first, a chunk at a time.
pub trait Source: Send {
    /// Appends packets to `chunk` until it holds at least `bytes` bytes of
    /// frames or the packets end; how many it appended (0: the end). The
    /// chunk's replay times continue the packets' before.
    fn fill(&mut self, chunk: &mut Trace, bytes: usize) -> Result<usize, PcapReadError>;
    /// Back to the first packet.
    fn rewind(&mut self) -> Result<(), PcapReadError>;
    /// The replay times of the packets read so far (those clamped or
    /// jumped over).
    fn timeline(&self) -> Timeline;
}

impl Source for CaptureReader<CaptureFile> {
    fn fill(&mut self, chunk: &mut Trace, bytes: usize) -> Result<usize, PcapReadError> {
        CaptureReader::fill(self, chunk, bytes)
    }

    fn rewind(&mut self) -> Result<(), PcapReadError> {
        CaptureReader::rewind(self)
    }

    fn timeline(&self) -> Timeline {
        CaptureReader::timeline(self)
    }
}

/// A trace generated as it is replayed (the same packets as
/// [`Trace::from_generated`] of the spec).
pub struct Generated {
    spec: TraceSpec,
    gen: Generator,
    timeline: Timeline,
}

impl Generated {
    /// The packets of `spec`.
    pub fn new(spec: &TraceSpec) -> Result<Generated, crate::SpecError> {
        Ok(Generated {
            gen: Generator::new(spec)?,
            spec: spec.clone(),
            timeline: Timeline::default(),
        })
    }
}

impl Source for Generated {
    fn fill(&mut self, chunk: &mut Trace, bytes: usize) -> Result<usize, PcapReadError> {
        chunk.set_timeline(self.timeline);
        let before = chunk.len();
        while chunk.data_len() < bytes {
            let Some(GenPacket { ts_ns, frame, .. }) = self.gen.next() else {
                break;
            };
            chunk.push(ts_ns, &frame, frame.len() as u32);
        }
        self.timeline = chunk.timeline();
        Ok(chunk.len() - before)
    }

    fn rewind(&mut self) -> Result<(), PcapReadError> {
        self.gen = Generator::new(&self.spec).expect("a spec that was valid");
        self.timeline = Timeline::default();
        Ok(())
    }

    fn timeline(&self) -> Timeline {
        self.timeline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_source_is_the_generated_trace_lap_after_lap() {
        let spec = TraceSpec {
            flows: 50,
            packets: 3_000,
            seed: 3,
            ..TraceSpec::default()
        };
        let whole = Trace::from_generated(Generator::new(&spec).unwrap());
        let mut s = Generated::new(&spec).unwrap();
        for _lap in 0..2 {
            let mut i = 0;
            loop {
                let mut c = Trace::new();
                if s.fill(&mut c, 32 << 10).unwrap() == 0 {
                    break;
                }
                for j in 0..c.len() {
                    assert_eq!((c.ts_ns(j), c.frame(j)), (whole.ts_ns(i), whole.frame(i)));
                    i += 1;
                }
            }
            assert_eq!(i, whole.len());
            s.rewind().unwrap();
        }
    }
}
