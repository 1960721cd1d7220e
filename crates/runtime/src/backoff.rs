//! How a core waits when it finds nothing to do: it yields its CPU (the next
//! packet is likely close), and once it has been idle for a while it naps, so
//! a run on a quiet interface leaves its CPUs to the rest of the machine — and
//! to the kernel, whose expedited RCU grace periods (`ip netns exec`, mounts,
//! module loads) wait for every CPU and stalled for tens of seconds behind
//! cores yielding in a loop.

use std::time::{Duration, Instant};

/// Idle this long before napping.
const NAP_AFTER: Duration = Duration::from_millis(1);
/// Idle polls spent spinning (no system call) before the first yield: at a
/// high rate the next frame is a microsecond away, and a yield per empty
/// poll was most of a poll-mode core's system calls.
const SPINS: u32 = 64;
/// Spin-loop hints per spinning idle poll (about a few hundred ns).
const SPIN_HINTS: u32 = 64;
/// A nap (a core that can wait on its inbox wakes for a message sooner).
pub(crate) const NAP: Duration = Duration::from_micros(50);

/// One core's idle wait.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    idle_since: Option<Instant>,
    /// Idle polls since the core last found work.
    polls: u32,
}

impl Backoff {
    /// Waits a moment: a yield, or a nap once idle for [`NAP_AFTER`].
    pub fn wait(&mut self) {
        if self.nap_due() {
            std::thread::sleep(NAP);
        } else {
            self.pause();
        }
    }

    /// A short wait before the nap is due: a spin while the core has been
    /// idle for only a few polls, then a yield.
    pub fn pause(&mut self) {
        self.polls = self.polls.saturating_add(1);
        if self.polls <= SPINS {
            for _ in 0..SPIN_HINTS {
                std::hint::spin_loop();
            }
        } else {
            std::thread::yield_now();
        }
    }

    /// True once idle for [`NAP_AFTER`]: the caller naps ([`NAP`]) its own
    /// way; otherwise it yields.
    pub fn nap_due(&mut self) -> bool {
        let since = *self.idle_since.get_or_insert_with(Instant::now);
        since.elapsed() >= NAP_AFTER
    }

    /// The core found work.
    pub fn reset(&mut self) {
        self.idle_since = None;
        self.polls = 0;
    }
}
