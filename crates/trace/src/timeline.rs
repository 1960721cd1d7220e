//! A trace's replay timeline from its capture timestamps: each packet is
//! replayed after the one before by the time between their timestamps, and
//! two kinds of timestamp that would stall or distort a replay are not
//! followed but counted — one earlier than the packet before (merged
//! captures have them) and one more than [`MAX_GAP_NS`] after it (a clock
//! that jumped, a corrupt record): the packet is replayed at the previous
//! packet's time, and the packets after it keep their spacing from it. A
//! single packet stamped a day ahead thus delays nothing, and a capture whose
//! clock stepped back goes on at its pace.

/// The longest quiet time a replay keeps between two packets, ns (a minute).
pub const MAX_GAP_NS: u64 = 60_000_000_000;

/// Replay times from capture timestamps, in order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// The previous packet's capture timestamp and replay time.
    last: Option<(u64, u64)>,
    /// Packets stamped earlier than the packet before.
    pub back: u64,
    /// Packets stamped more than [`MAX_GAP_NS`] after the packet before.
    pub jumps: u64,
}

impl Timeline {
    /// The replay time (ns, on the first packet's clock) of the next packet,
    /// stamped `ts_ns`.
    pub fn next(&mut self, ts_ns: u64) -> u64 {
        let at = match self.last {
            None => ts_ns,
            Some((raw, at)) if ts_ns < raw => {
                self.back += 1;
                at
            }
            Some((raw, at)) if ts_ns - raw > MAX_GAP_NS => {
                self.jumps += 1;
                at
            }
            Some((raw, at)) => at + (ts_ns - raw),
        };
        self.last = Some((ts_ns, at));
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(ts: &[u64]) -> (Vec<u64>, Timeline) {
        let mut t = Timeline::default();
        (ts.iter().map(|&x| t.next(x)).collect(), t)
    }

    #[test]
    fn in_order_timestamps_are_kept() {
        let (at, t) = times(&[100, 150, 150, 10_000]);
        assert_eq!(at, [100, 150, 150, 10_000]);
        assert_eq!((t.back, t.jumps), (0, 0));
    }

    #[test]
    fn one_packet_a_day_ahead_delays_nothing() {
        let day = 86_400_000_000_000;
        let (at, t) = times(&[1_000, 2_000, 2_000 + day, 3_000, 4_000]);
        // the outlier at the previous packet's time; the packets after keep
        // their spacing from it (the step back from it counted too)
        assert_eq!(at, [1_000, 2_000, 2_000, 2_000, 3_000]);
        assert_eq!((t.back, t.jumps), (1, 1));
    }

    #[test]
    fn a_clock_stepped_back_goes_on_at_its_pace() {
        let (at, t) = times(&[5_000, 6_000, 1_000, 1_500, 2_500]);
        assert_eq!(at, [5_000, 6_000, 6_000, 6_500, 7_500]);
        assert_eq!((t.back, t.jumps), (1, 0));
    }

    #[test]
    fn a_quiet_minute_is_kept_and_longer_is_not() {
        let (at, t) = times(&[0, MAX_GAP_NS, 2 * MAX_GAP_NS + 1]);
        assert_eq!(at, [0, MAX_GAP_NS, MAX_GAP_NS]);
        assert_eq!((t.back, t.jumps), (0, 1));
    }
}
