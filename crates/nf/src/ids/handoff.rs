//! A flow's matcher states moving between the workers and the matching
//! component while traffic flows (the IDS re-placed live).
//!
//! - **To the component**: the flow's next job carries its states
//!   ([`Moved`]); the component installs them before scanning. The ring is
//!   FIFO and a flow's jobs are submitted one after another, so nothing of the
//!   flow is scanned there before them.
//! - **Back to the worker**: the worker sends a recall with the flow's next
//!   job and keeps handing the flow's payloads to the component, counting
//!   them. After each of the flow's jobs the component publishes the states
//!   with the count of jobs it has scanned since the recall ([`Handoff`]).
//!   When the published count equals the worker's, every payload it handed
//!   over has been scanned: it takes the states and scans inline from the
//!   next payload on. No payload is skipped or scanned twice, none out of
//!   order, and the worker never waits.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::matcher::{Progress, Stream};

/// A flow's states for both directions, by side of its key (`Lo`, `Hi`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// The matcher states.
    pub st: [Stream; 2],
    /// Multi-piece rules part-way.
    pub pr: [Progress; 2],
}

/// What the component publishes for a recalled flow.
#[derive(Debug)]
pub struct Returned {
    /// The flow's jobs it has scanned since the recall (the recall's own
    /// included).
    pub seq: u64,
    /// Its states after them.
    pub states: Moved,
}

/// Where a recalled flow's states come back.
#[derive(Debug, Default)]
pub struct Handoff {
    /// The latest publication (none before the recall's job is scanned).
    pub ready: ArcSwapOption<Returned>,
}

/// A recall in a flow's entry: the hand-off and the jobs handed over since.
#[derive(Clone, Debug)]
pub struct Recall {
    /// Where the states come back.
    pub handoff: Arc<Handoff>,
    /// The flow's jobs submitted since the recall (its own included).
    pub sent: u64,
}

impl PartialEq for Recall {
    fn eq(&self, o: &Recall) -> bool {
        Arc::ptr_eq(&self.handoff, &o.handoff) && self.sent == o.sent
    }
}

impl Eq for Recall {}

impl Recall {
    /// The states, once every job handed over has been scanned.
    pub fn take(&self) -> Option<Moved> {
        let r = self.handoff.ready.load();
        r.as_ref()
            .filter(|r| r.seq == self.sent)
            .map(|r| r.states.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_come_back_only_once_every_job_handed_over_is_scanned() {
        let handoff = Arc::new(Handoff::default());
        let mut r = Recall {
            handoff: handoff.clone(),
            sent: 1,
        };
        assert_eq!(r.take(), None, "the recall's own job not scanned yet");
        let publish = |seq: u64| {
            let states = Moved::default();
            handoff
                .ready
                .store(Some(Arc::new(Returned { seq, states })));
        };
        // the worker handed one more payload over before looking again
        r.sent = 2;
        publish(1);
        assert_eq!(r.take(), None, "one of its two jobs scanned: not yet");
        publish(2);
        assert!(r.take().is_some(), "after both");
    }
}
