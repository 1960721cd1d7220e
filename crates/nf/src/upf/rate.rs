//! A QER's maximum bit rate, enforced by the generic cell rate algorithm
//! (GCRA, ITU-T I.371) over bytes: one atomic word, the theoretical arrival
//! time, that every core carrying the session updates with a compare and
//! swap — the limit holds for the session however its flows are spread.

use std::sync::atomic::{AtomicU64, Ordering};

/// A rate limit of `kbps`, bursts of up to `burst` bytes.
#[derive(Debug)]
pub struct Gcra {
    /// Picoseconds a byte takes at the rate.
    ps_per_byte: u64,
    /// How far (ps) the arrival time may run ahead of now.
    tolerance_ps: u64,
    /// Theoretical arrival time (ps).
    tat: AtomicU64,
    /// The rate, as configured.
    pub kbps: u64,
}

impl Gcra {
    /// A limit of `kbps` kbit/s with bursts of `burst` bytes.
    pub fn new(kbps: u64, burst: u64) -> Gcra {
        let ps_per_byte = 8_000_000_000 / kbps.max(1);
        Gcra {
            ps_per_byte,
            tolerance_ps: burst.saturating_mul(ps_per_byte),
            tat: AtomicU64::new(0),
            kbps,
        }
    }

    /// Takes `bytes` at `now_ns` if the rate allows it.
    pub fn allow(&self, now_ns: u64, bytes: u64) -> bool {
        let now = now_ns.saturating_mul(1000);
        let cost = bytes.saturating_mul(self.ps_per_byte);
        // Relaxed load, then a compare-and-swap with AcqRel: the word is the
        // whole state (no other memory is published with it); the CAS
        // orders each core's update after the one it read.
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let start = tat.max(now);
            if start - now > self.tolerance_ps {
                return false;
            }
            match self.tat.compare_exchange_weak(
                tat,
                start.saturating_add(cost),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(t) => tat = t,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_sender_gets_the_rate_and_no_more() {
        // 8 Mbit/s = 1 000 bytes per ms; 1 000-byte packets every 0.1 ms
        let g = Gcra::new(8_000, 3_000);
        let passed = (0..10_000u64)
            .filter(|i| g.allow(i * 100_000, 1_000))
            .count();
        // 1 s at 1 000 bytes/ms: 1 000 packets, plus the burst's 3 (and the first)
        assert!((1_000..=1_004).contains(&passed), "{passed}");
    }

    #[test]
    fn below_the_rate_nothing_is_dropped() {
        let g = Gcra::new(8_000, 1_500);
        assert!((0..1_000u64).all(|i| g.allow(i * 2_000_000, 1_000)));
    }
}
