//! Replay schedules: when each packet of a preloaded trace should be released,
//! relative to the start of the replay. Pure: the runtime turns these offsets into
//! waits on its own clock.

use crate::Trace;

/// How fast to replay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pace {
    /// As fast as the consumer takes packets (release time 0 for every packet).
    Max,
    /// The trace's own timing divided by `speed` (2.0 = twice as fast).
    Timed {
        /// Speed factor, > 0.
        speed: f64,
    },
}

/// The time from a lap's start to the next's, for a trace of `packets`
/// packets lasting `duration_ns`: a lap starts one mean gap after the one
/// before ended.
pub fn lap_period(duration_ns: u64, packets: u64) -> u64 {
    duration_ns + duration_ns / packets.saturating_sub(1).max(1)
}

/// A replay of a trace `loops` times at a [`Pace`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    /// Pace.
    pub pace: Pace,
    /// How many times the trace is played (≥ 1).
    pub loops: u32,
}

impl Schedule {
    /// Total packets released.
    pub fn packets(&self, trace: &Trace) -> u64 {
        trace.len() as u64 * u64::from(self.loops)
    }

    /// The trace packet index and release offset (ns from the start) of the `n`-th
    /// released packet, or `None` past the end. A loop starts one mean gap after the
    /// previous loop's last packet.
    pub fn release(&self, trace: &Trace, n: u64) -> Option<(usize, u64)> {
        let len = trace.len() as u64;
        if len == 0 || n >= self.packets(trace) {
            return None;
        }
        let (lap, i) = (n / len, (n % len) as usize);
        let at = match self.pace {
            Pace::Max => 0,
            Pace::Timed { speed } => {
                let period = lap_period(trace.duration_ns(), len);
                let t = lap * period + trace.ts_ns(i).saturating_sub(trace.ts_ns(0));
                (t as f64 / speed) as u64
            }
        };
        Some((i, at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace() -> Trace {
        let mut t = Trace::new();
        for (i, ts) in [100u64, 200, 400].iter().enumerate() {
            t.push(*ts, &[i as u8; 60], 60);
        }
        t
    }

    #[test]
    fn timed_scales_and_loops() {
        let t = trace();
        let s = Schedule {
            pace: Pace::Timed { speed: 2.0 },
            loops: 2,
        };
        let r: Vec<_> = (0..7).map(|n| s.release(&t, n)).collect();
        // duration 300, mean gap 150 → period 450; halved by speed 2
        assert_eq!(
            r,
            [
                Some((0, 0)),
                Some((1, 50)),
                Some((2, 150)),
                Some((0, 225)),
                Some((1, 275)),
                Some((2, 375)),
                None
            ]
        );
    }

    #[test]
    fn max_releases_immediately() {
        let s = Schedule {
            pace: Pace::Max,
            loops: 1,
        };
        assert_eq!(s.release(&trace(), 2), Some((2, 0)));
        assert_eq!(s.release(&Trace::new(), 0), None);
    }
}
