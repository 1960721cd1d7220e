//! A primary's poison bits (Sirius §3.2), as a pure machine: a flow whose
//! last copy the secondary has not acknowledged is *poisoned*, and each of
//! its packets is copied again — even one that changes nothing — until an
//! acknowledgement of its latest copy clears it. A packet thus leaves only
//! once both nodes hold the state it made, whatever became of earlier copies.
//!
//! The one rule both drivers follow: [`Poison::on_packet`] says whether a
//! packet goes to the secondary or out, [`Poison::sent`] and
//! [`Poison::acked`] keep the bits. A real node's working core keeps one per
//! core (its flows named by shard and entry, and an entry's generation so
//! that a reused entry is another flow); the simulator's [`crate::replica`]
//! machine keeps one per node. Copy numbers and times are arguments.

use std::collections::HashMap;
use std::hash::Hash;

/// Where a packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Out to its destination: nothing the secondary lacks.
    Transmit,
    /// To the secondary with its flow's state: it changed the state, or the
    /// flow is poisoned.
    Copy,
    /// Out, alone: it changed the state (or the flow is poisoned) but there
    /// is no secondary to copy to — the state lives on this node only.
    Unprotected,
}

/// The poison bits of the flows `F` of one primary.
#[derive(Clone, Debug)]
pub struct Poison<F> {
    /// Poisoned flows → (their generation, their last copy's number).
    poisoned: HashMap<F, (u32, u32)>,
    /// Copy number → its flow and when it was sent, until acknowledged.
    unacked: HashMap<u32, (F, u64)>,
}

impl<F> Default for Poison<F> {
    fn default() -> Poison<F> {
        Poison {
            poisoned: HashMap::new(),
            unacked: HashMap::new(),
        }
    }
}

impl<F: Copy + Eq + Hash> Poison<F> {
    /// A packet of `flow` (generation `gen`) ran: it `changed` its state or
    /// not, and the node has a secondary or not.
    pub fn on_packet(&self, flow: F, gen: u32, changed: bool, secondary: bool) -> Route {
        if !changed && !self.is_poisoned(flow, gen) {
            Route::Transmit
        } else if secondary {
            Route::Copy
        } else {
            Route::Unprotected
        }
    }

    /// Copy `seq` of `flow` (generation `gen`) left at `now`: the flow is
    /// poisoned until that copy is acknowledged (an earlier copy's
    /// acknowledgement no longer clears it).
    pub fn sent(&mut self, flow: F, gen: u32, seq: u32, now: u64) {
        if let Some((_, old)) = self.poisoned.insert(flow, (gen, seq)) {
            self.unacked.remove(&old);
        }
        self.unacked.insert(seq, (flow, now));
    }

    /// The secondary acknowledged copy `seq` at `now`: the flow it named, if
    /// it was one waited for, and the copy's lag (ns).
    pub fn acked(&mut self, seq: u32, now: u64) -> Option<(F, u64)> {
        let (flow, sent) = self.unacked.remove(&seq)?;
        if self.poisoned.get(&flow).is_some_and(|(_, s)| *s == seq) {
            self.poisoned.remove(&flow);
        }
        Some((flow, now.saturating_sub(sent)))
    }

    /// `flow` is whole at the secondary by other means (a bulk-sync copy of
    /// its latest state acknowledged; its primary failed and this node, its
    /// old secondary, adopts it; no secondary is left to wait for).
    pub fn clear(&mut self, flow: F) {
        if let Some((_, seq)) = self.poisoned.remove(&flow) {
            self.unacked.remove(&seq);
        }
    }

    /// True if `flow`, in generation `gen`, is poisoned (a flow of another
    /// generation in the same place is not).
    pub fn is_poisoned(&self, flow: F, gen: u32) -> bool {
        self.poisoned.get(&flow).is_some_and(|(g, _)| *g == gen)
    }

    /// Flows poisoned now.
    pub fn poisoned(&self) -> usize {
        self.poisoned.len()
    }

    /// Copies waiting for their acknowledgement.
    pub fn unacked(&self) -> usize {
        self.unacked.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_flow_stays_poisoned_until_its_last_copy_is_acknowledged() {
        let mut p = Poison::default();
        let f = (3usize, 17u32);
        assert_eq!(p.on_packet(f, 1, false, true), Route::Transmit);
        assert_eq!(p.on_packet(f, 1, true, true), Route::Copy);
        p.sent(f, 1, 10, 1_000);
        assert!(p.is_poisoned(f, 1));
        // a packet that changes nothing is copied again while poisoned
        assert_eq!(p.on_packet(f, 1, false, true), Route::Copy);
        // a newer entry in the same slot is another flow
        assert!(!p.is_poisoned(f, 2));
        // copied again before the first was acknowledged: only the last
        // copy's acknowledgement clears it
        p.sent(f, 1, 11, 2_000);
        assert_eq!(p.acked(10, 3_000), None, "no longer waited for");
        assert!(p.is_poisoned(f, 1));
        assert_eq!(p.acked(11, 5_000), Some((f, 3_000)));
        assert!(!p.is_poisoned(f, 1));
        assert_eq!((p.poisoned(), p.unacked()), (0, 0));
        assert_eq!(p.acked(11, 6_000), None, "once");
        assert_eq!(p.acked(99, 6_000), None, "unknown");
    }

    #[test]
    fn without_a_secondary_a_change_goes_out_unprotected_and_clear_forgets() {
        let mut p = Poison::default();
        p.sent(7u64, 0, 1, 0);
        assert_eq!(p.on_packet(7, 0, false, false), Route::Unprotected);
        p.clear(7);
        assert_eq!(p.on_packet(7, 0, false, false), Route::Transmit);
        assert_eq!((p.poisoned(), p.unacked()), (0, 0));
        assert_eq!(p.acked(1, 5), None);
    }

    proptest! {
        /// Against a model: a flow is poisoned exactly when its latest copy
        /// is neither acknowledged nor cleared; nothing leaks.
        #[test]
        fn the_bits_follow_the_latest_copy_of_each_flow(
            ops in proptest::collection::vec((0u8..3, 0u64..4, 0u32..40), 1..200)
        ) {
            let mut p = Poison::default();
            let mut latest: HashMap<u64, u32> = HashMap::new();
            let mut seq = 0u32;
            let mut sent: Vec<(u32, u64)> = Vec::new();
            for (op, flow, pick) in ops {
                match op {
                    0 => {
                        p.sent(flow, 0, seq, 0);
                        latest.insert(flow, seq);
                        sent.push((seq, flow));
                        seq += 1;
                    }
                    1 if !sent.is_empty() => {
                        let (s, f) = sent[pick as usize % sent.len()];
                        let waited = latest.get(&f) == Some(&s);
                        let got = p.acked(s, 1);
                        prop_assert_eq!(got.is_some(), waited);
                        if waited {
                            latest.remove(&f);
                        }
                    }
                    _ => {
                        p.clear(flow);
                        latest.remove(&flow);
                    }
                }
                for f in 0..4 {
                    prop_assert_eq!(p.is_poisoned(f, 0), latest.contains_key(&f));
                }
                prop_assert_eq!(p.unacked(), latest.len());
            }
        }
    }
}
